"""The system's headless Chromium (the Debian package ``chromium``; .ci/run installs it where apt is there): the
browser tests drive it, and the static figures are exported through it (viz.render.write_svg). Without it those
checks are skipped with a message naming the package."""
import shutil

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not found: install the Debian package `chromium` "
                             "(apt-get install -y chromium) to run the browser tests and export static figures")
