"""tests/conftest.py keeps what exists after collection out of the garbage collector's full
passes (docs/decisions.md#gc-freeze-after-collection)."""

import gc


def test_the_imports_objects_are_frozen_and_new_garbage_is_still_collected():
    # TensorFlow's and Keras's objects alone are ~390k (conftest imports Keras).
    assert gc.get_freeze_count() > 100_000

    class Cycle:
        pass

    cycle = Cycle()
    cycle.self = cycle
    marker = id(cycle)
    del cycle
    gc.collect()
    assert not any(id(o) == marker and type(o).__name__ == "Cycle" for o in gc.get_objects())
