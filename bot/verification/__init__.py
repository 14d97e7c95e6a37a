"""A verification's life: the pure state machine, its storage and its queued steps."""
