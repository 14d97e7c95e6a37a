"""What each feature does, in the App's own terms: a handler reads a webhook's payload and
calls one of these with plain values; they act through the ports (`StepPorts`) and know
nothing of payloads."""
