"""Shapes of a sampler call: shared prompts, mesh splits and slices, by hand."""
import pytest

from rlsvr.sampling.layout import Buckets, layout, length_bucket, slice_rows

ONE_DEVICE = lambda rows: rows


def on_devices(n):
  """Rows per device when the batch splits over n devices only if they divide it."""
  return lambda rows: rows // n if rows % n == 0 else rows


def test_layout_shares_repeated_prompts_and_buckets_the_prompt_count():
  assert layout(16, 8, True, ONE_DEVICE) == (8, 2, 16)
  assert layout(24, 8, True, ONE_DEVICE) == (8, 4, 32)  # 3 prompts -> bucket 4, 32 rows.
  assert layout(24, 1, True, ONE_DEVICE) == (1, 32, 32)
  assert layout(16, 8, False, ONE_DEVICE) == (1, 16, 16)
  assert layout(12, 8, True, ONE_DEVICE) == (1, 16, 16)  # Not whole groups: nothing shared.


def test_layout_does_not_replicate_the_prefill_over_a_mesh():
  # 16 rows on 8 devices: 2 each. 2 prompts (whole on each device): still 2 -> shared.
  assert layout(16, 8, True, on_devices(8)) == (8, 2, 16)
  # 4 prompts whole on each device would be 4 > 2 prefill rows: not shared.
  assert layout(16, 4, True, on_devices(8)) == (1, 16, 16)
  # 8 prompts, one per device: shared.
  assert layout(64, 8, True, on_devices(8)) == (8, 8, 64)


def test_slices_fit_the_cache_budget():
  kw = dict(max_rows=0, share=True, rows_per_device=ONE_DEVICE)
  # 40k prompts (P=40960), N=4096; groups of 8 share a prompt: 64 rows = 8 x 40960 + 64 x 4096.
  assert slice_rows(1024, 8, 39296, 4096, max_cache_tokens=8 * 40960 + 64 * 4096, **kw) == 64
  # Unshared rows (45056 slots each): 13 would fit but run as the batch bucket 16, which
  # does not; 8 rows is the largest slice that fits.
  assert slice_rows(1024, 1, 39296, 4096, max_cache_tokens=8 * 40960 + 64 * 4096, **kw) == 8
  assert slice_rows(100, 1, 10, 10, max_cache_tokens=0, **kw) == 100  # No limit.
  assert slice_rows(100, 1, 10, 10, max_cache_tokens=10**9, max_rows=30, share=True,
                    rows_per_device=ONE_DEVICE) == 30  # max_rows still caps.
  with pytest.raises(ValueError, match="exceeds max_cache_tokens"):
    slice_rows(4, 1, 4000, 100, max_cache_tokens=1000, **kw)


def test_buckets_round_up_and_refuse_beyond_the_largest():
  assert Buckets.pick(5, (4, 8, 16), "batch") == 8
  with pytest.raises(ValueError, match="largest bucket"):
    Buckets.pick(17, (4, 8, 16), "batch")


def test_length_buckets_are_powers_of_two_with_half_steps_from_128_then_steps_of_4096():
  assert [length_bucket(n) for n in (0, 1, 16, 17, 100, 128)] == [16, 16, 16, 32, 128, 128]
  assert length_bucket(5, minimum=4) == 8
  # A 185-token GSM8K prompt pads to 192, not 256; an 1100-token one to 1536, not 2048.
  assert [length_bucket(n) for n in (129, 185, 193, 257, 385, 1100, 1537, 6145)] == [
      192, 192, 256, 384, 512, 1536, 2048, 8192]
  # Above 128 no length is padded by more than half of itself.
  assert all(length_bucket(n) <= 1.5 * n for n in range(129, 3 * 4096))
  # A 40k-token detection prompt pads to 40960, not 65536; the sampler pads prompts alike, so
  # a prompt it padded to P is padded to P again in the train batch.
  for n, padded in ((8192, 8192), (8193, 12288), (12288, 12288), (39296, 40960)):
    assert length_bucket(n) == padded == Buckets.pick(n, Buckets().prompt, "prompt")
