"""Test-suite configuration.

Under CI (the CI environment variable is set), Hypothesis runs derandomized:
the same examples every run, so a landing never depends on luck.  Locally it
explores new examples each run; INTERVAL_PROPS_EXAMPLES raises the count.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
