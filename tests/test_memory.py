"""The daemon's memory housekeeping: what loading left alive is kept out of full collections."""

import gc
from types import SimpleNamespace

from codespec.server.config import Settings
from codespec.server.daemon import Daemon


def test_the_loaded_pair_is_frozen_out_of_garbage_collection():
    # stands for a pair: many small Python objects (and the few fields the daemon reads)
    engine = SimpleNamespace(health=None)
    loaded = SimpleNamespace(
        load_s=0.0,
        device="cpu",
        quantization="",
        engine=engine,
        objects=[[i] for i in range(10_000)],
    )
    daemon = Daemon(lambda: loaded, Settings())
    gc.unfreeze()
    try:
        daemon.load_in_background()
        assert daemon.slot.get() is loaded
        assert gc.get_freeze_count() >= len(loaded.objects)
        # a full collection no longer walks them (frozen objects are in no generation)
        assert not any(obj is loaded for obj in gc.get_objects())
    finally:
        gc.unfreeze()
        daemon.worker.stop()
