"""The GPU reference task: a real decoder architecture with random weights, served over
HTTP in two variants (eager and CUDA-graph decode) that stand for base and head."""
