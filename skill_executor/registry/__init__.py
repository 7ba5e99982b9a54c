"""Installed skills: packages (:mod:`.archive`, :mod:`.package`, :mod:`.installdir`), the
versions of each skill and their manifests (:mod:`.store`, :mod:`.manifest`, :mod:`.refs`),
and the repository every entry point reads skills from (:mod:`.repository`)."""

from .archive import PackageLimits
from .package import InstallOutcome, install_package, uninstall
from .repository import Catalog, SkillRepository, discover

__all__ = ["Catalog", "InstallOutcome", "PackageLimits", "SkillRepository", "discover", "install_package", "uninstall"]
