"""Seeing inside a run: the profiler trace's summary (trace_summary; the window itself is a training callback,
swiftbox/training/profile_window.py), the config
check between two artifacts (fingerprint, compare) and the layer-by-layer precision compare (precision)."""
