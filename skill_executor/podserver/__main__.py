"""``python -m skill_executor.podserver`` (the image's ``sandboxd`` command runs :func:`main`)."""

import sys

from .main import main

if __name__ == "__main__":
    sys.exit(main())
