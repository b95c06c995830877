"""Training report from a TensorBoard folder: one PNG per question, report.md and report.json.

``retool-report --logdir <TensorBoard dir> [--published FILE] --output DIR`` reads the run's RL stage folder (and
its SFT stage folder when the logdir holds one) and draws small multiples, one figure per question: accuracy per
data source beside the published result, tool use and tool outcomes as rates per data source, turns and tool calls
per trajectory, reward (raw and smoothed), response length and the SFT loss. Series that are zero at every step are
named in one line instead of being drawn. Modules: events (reading), panels (what goes where), plot (drawing),
markdown (report.md), cli (the command).
"""

from retool.report.cli import build_report, load_published, main
from retool.report.events import ReportError, find_event_dirs, read_event_dir, read_run

__all__ = ["ReportError", "build_report", "find_event_dirs", "load_published", "main", "read_event_dir", "read_run"]
