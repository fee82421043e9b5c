"""Callback state in ``last.pt``: which callback gets which state back on a resume."""

from dmlkit.engine.callbacks import Callback, callback_states, load_callback_states


class Counter(Callback):
    def __init__(self, count=0):
        self.count = count

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = state["count"]


class Stateless(Callback):
    pass


def test_states_go_back_to_callbacks_of_the_same_class_and_rank_whatever_else_runs():
    saved = callback_states([Stateless(), Counter(3), Counter(7)])
    assert saved == {"Counter": {"count": 3}, "Counter#2": {"count": 7}}  # stateless callbacks keep nothing
    first, second = Counter(), Counter()
    load_callback_states([first, Stateless(), Stateless(), second], saved)  # a resume with other stateless ones
    assert (first.count, second.count) == (3, 7)


def test_a_callback_without_a_saved_state_starts_afresh():
    fresh = Counter(1)
    load_callback_states([fresh], {})  # a checkpoint written before callbacks kept state
    assert fresh.count == 1
    load_callback_states([fresh], {"Other": {"count": 9}})
    assert fresh.count == 1
