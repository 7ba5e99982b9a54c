"""Installed skills: packages (:mod:`.archive`, :mod:`.unpacking`, :mod:`.package`, :mod:`.installdir`), the
versions of each skill and their manifests (:mod:`.store`, :mod:`.manifest`, :mod:`.refs`),
and the repository every entry point reads skills from (:mod:`.repository`; finding
skills under the roots: :mod:`.discovery`; where the roots may lie: :mod:`.roots`)."""

from .discovery import Catalog, discover
from .package import InstallOutcome, install_package, uninstall
from .repository import SkillRepository
from .unpacking import PackageLimits

__all__ = ["Catalog", "InstallOutcome", "PackageLimits", "SkillRepository", "discover", "install_package", "uninstall"]
