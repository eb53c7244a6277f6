# SPDX-License-Identifier: Apache-2.0
"""paddle.device of the stand-in (see paddle/__init__.py)."""
from . import cuda  # noqa: F401
