# SPDX-License-Identifier: Apache-2.0
"""A stand-in for JAX: imported, nothing more (cupool's flush finds it in
sys.modules and says its memory cannot be given back)."""
