import pytest

from tests.model.hf_reference import make_hf_model


@pytest.fixture(scope="session")
def tiny_qwen3():
  """(torch model, our config, our params) of an untied tiny Qwen3 with GQA 2."""
  return make_hf_model("qwen3", tie_word_embeddings=False)
