"""Seeing inside a run: the profiler window on training steps (profile_window, trace_summary), the config
check between two artifacts (fingerprint, compare) and the layer-by-layer precision compare (precision)."""
