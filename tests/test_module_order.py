"""The lanes hand whole modules to xdist's workers longest first (tests/conftest.py: LONGEST),
so that no module of minutes starts last and ends its lane minutes after the others. Checked
with xdist's own loadscope scheduler, given the collection our hook sorts and the options our
`pytest_configure` leaves on a controller."""

from types import SimpleNamespace

from xdist.scheduler import LoadScopeScheduling

from tests import conftest


class Worker:
    """What the scheduler calls on one of its workers."""

    def __init__(self, name):
        self.gateway, self.shutting_down, self.sent = SimpleNamespace(id=name), False, []

    def send_runtest_some(self, indices):
        self.sent.extend(indices)

    def shutdown(self):
        self.shutting_down = True


def controller(workers: int):
    """A controller's config as `pytest -n N --dist loadscope` leaves it before our hook:
    xdist's own default keeps `loadscopereorder` on (xdist/plugin.py, `--loadscope-reorder`)."""
    option = SimpleNamespace(numprocesses=workers, tx=["popen"] * workers, dist="loadscope",
                             loadscopereorder=True)
    return SimpleNamespace(option=option, getvalue=lambda name: getattr(option, name))


def test_xdist_starts_the_longest_modules_first_whatever_their_number_of_tests():
    longest = sorted(conftest.LONGEST, key=conftest.LONGEST.get, reverse=True)[:2]
    # the two longest modules hold one and two tests; a quick one collected before them, ten
    modules = {"test_aa_quick.py": 10, longest[0]: 1, longest[1]: 2}
    items = [SimpleNamespace(path=SimpleNamespace(name=name), nodeid=f"tests/{name}::t{i}")
             for name, count in modules.items() for i in range(count)]
    config = controller(2)
    conftest.pytest_configure(config)
    conftest.pytest_collection_modifyitems(config, items)
    collection = [item.nodeid for item in items]

    scheduler, workers = LoadScopeScheduling(config), [Worker("gw0"), Worker("gw1")]
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()

    def module(index):
        return collection[index].split("::")[0].removeprefix("tests/")

    firsts = [module(worker.sent[0]) for worker in workers]
    assert firsts == longest, f"the workers started {firsts}; the longest are {longest}"
    # the quick one is handed out after them
    assert module(workers[0].sent[-1]) == "test_aa_quick.py"
