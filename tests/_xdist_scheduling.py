"""How `make test` spreads the tests over pytest-xdist workers (`--dist loadfile`, with the
scheduler that tests/conftest.py installs for it).

A test file is one unit of work, so that its module fixtures are made in one worker, except
the tests named in `ONE_UNIT_EACH`: the documented pages, each a fresh interpreter of up to a
couple of minutes, would otherwise all run on one worker while the other idles. (xdist's own
`--dist loadgroup` would do this with marks, but its group names do not reach the scheduler
under pytest 9.)
"""

from xdist.scheduler.loadscope import LoadScopeScheduling

# Node-id prefixes of the tests that are each a unit of their own.
ONE_UNIT_EACH = ("tests/test_docs_examples.py::test_documented_examples_run[",)


class FileScheduling(LoadScopeScheduling):
    """`--dist loadfile`, except that each test named in `ONE_UNIT_EACH` is its own unit."""

    def _split_scope(self, nodeid):
        if nodeid.startswith(ONE_UNIT_EACH):
            return nodeid
        return nodeid.split("::", 1)[0]
