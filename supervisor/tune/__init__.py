"""The tuner (issue 39): a canary search for the server flags that give the most output tokens
per GPU-second, while the job runs. measure.py (a window's figures), search.py (which flag
next), safety.py (what rejects a candidate), worth.py (whether a trial pays), tuner.py (the
async runner that drives trials through the fleet's retune)."""
