"""The console of a run: a compact view a person can follow, while the log file keeps every byte.

``python -m retool.console`` (retool.console.cli) runs a stage's command, appends all it prints to the stage's log
and prints start-up in a few lines, a line per step and per validation, warnings and errors at once, and a progress
bar on a terminal. scripts/launch.sh runs verl through it; retool-eval runs itself through it. ``VERBOSE=1`` prints
the full output instead. Parts: lines (what one line is), view (the compact lines), notices (which warnings and
errors to show), startup (the first lines, from the resolved config), output (terminal or plain), stream (the view).
"""
