# SPDX-License-Identifier: Apache-2.0
"""The simulated driver's statistics (test/simcuda/simcuda.h's
simcuda_stats), for the Python programs test_shim runs."""
import ctypes


class SimStats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulong) for n in (
        "mallocs", "frees", "bad_frees", "syncs", "event_records",
        "legacy_records", "stream_waits", "event_queries", "capture_queries", "vmm_maps",
        "vmm_unmaps", "unsynced_unmaps")] + [
        (n, ctypes.c_ulonglong) for n in ("vmm_mapped", "used", "capacity")]


def driver_used(sim, device=0):
    """Bytes the simulated driver holds for device (sim: the runtime's
    library, loaded with ctypes)."""
    st = SimStats()
    sim.simcuda_get_stats(device, ctypes.byref(st))
    return st.used
