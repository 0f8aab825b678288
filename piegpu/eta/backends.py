"""Program.emit and Program.run: the driver of the target table (piegpu/targets.py), under its eta name.

RUNNERS is the table's own dict, so a backend registered here (a test's fake) is one
Program.run finds.
"""

from ..targets import RUNNERS, TARGETS, emit, run

__all__ = ["TARGETS", "RUNNERS", "emit", "run"]
