"""Offline stand-in for ansible-test's pip bootstrap script (get-pip.py).

ansible-test makes its virtual environments without pip and downloads get-pip.py from
ci-files.testing.ansible.com to put pip in; where only a package index can be reached, that
download fails ("Download failed ... can be manually downloaded and saved to
~/.ansible/test/cache/get_pip_<version>.py"). scripts/sanity.sh saves this file there under
that name instead. It does what get-pip.py does with the same arguments: put a pip into the
running interpreter (here from the wheel that ships with CPython's ensurepip), then
`pip install` the requested packages (ansible-test asks for its pinned pip) from the index.
"""

from __future__ import annotations

import ensurepip
import subprocess
import sys

# Options only get-pip.py understands; pip itself would refuse them.
GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}


def main() -> int:
    ensurepip.bootstrap(upgrade=True, default_pip=True)
    args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY]
    return subprocess.call([sys.executable, "-m", "pip", "install", "--upgrade", *args])


if __name__ == "__main__":
    sys.exit(main())
