"""`Completion`: validation, and that the environments use the sampler's type."""
import pytest

from rlsvr.envs import base
from rlsvr.sampling import Completion


def test_envs_reexport_the_samplers_completion():
  assert base.Completion is Completion


def test_fields_and_immutability():
  c = Completion((5, 2), (-0.1, -0.2), "eos")
  assert (c.ids, c.logprobs, c.finish_reason) == ((5, 2), (-0.1, -0.2), "eos")
  with pytest.raises(AttributeError):
    c.ids = ()


@pytest.mark.parametrize("ids,logprobs,reason", [((1,), (), "eos"), ((1,), (-1.0,), "done")])
def test_inconsistent_completions_are_refused(ids, logprobs, reason):
  with pytest.raises(ValueError):
    Completion(ids, logprobs, reason)
