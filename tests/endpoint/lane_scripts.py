"""Scripts of lane-table changes for the endpoint's property tests (imported by name:
pytest puts this folder on ``sys.path``): joins, leaves, replacements (a lane name back
at another URL), full sets and learned names, as hypothesis strategies, and how to apply
one step to a :class:`LaneTable`."""

from __future__ import annotations

from hypothesis import strategies as st

from ddsup.endpoint._lanes import LaneInfo, LaneTable

INSTANCES = [f"lane@{i}" for i in range(6)]
MODELS = ["m", "n"]
LEARNED = [(), ("m",), ("adapter-a",), ("adapter-a", "adapter-b"), ("n",)]


def info(instance: str, model: str, port: int, alias: bool) -> LaneInfo:
    served = ("alias",) if alias else ()
    return LaneInfo(instance, model, f"http://127.0.0.1:{port}", served_names=served)


infos = st.builds(
    info,
    st.sampled_from(INSTANCES),
    st.sampled_from(MODELS),
    st.integers(8000, 8002),  # the same lane name may come back at another URL
    st.booleans(),
)
joins = st.tuples(
    st.just("change"), st.lists(infos, max_size=3), st.lists(st.sampled_from(INSTANCES), max_size=2)
)
steps = st.one_of(
    joins,
    st.tuples(st.just("add"), infos),
    st.tuples(st.just("remove"), st.sampled_from(INSTANCES)),
    st.tuples(st.just("set_ready"), st.lists(infos, max_size=4)),
)
learning = st.tuples(st.just("learn"), st.sampled_from(INSTANCES), st.sampled_from(LEARNED))


def apply_step(table: LaneTable, step: tuple[object, ...]) -> None:
    match step:
        case ("change", list() as added, list() as removed):
            table.change(added, removed)
        case ("add", LaneInfo() as lane):
            table.add(lane)
        case ("remove", str() as instance):
            table.remove(instance)
        case ("set_ready", list() as lanes):
            table.set_ready({lane.instance: lane for lane in lanes}.values())
        case ("learn", str() as instance, tuple() as names):
            state = next((s for s in table.states() if s.info.instance == instance), None)
            if state is not None:
                table.learn_names(state.info, names)
        case _:
            raise AssertionError(step)
