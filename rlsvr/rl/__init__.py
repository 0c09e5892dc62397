"""GRPO: pure loss functions (`grpo`), model logprobs (`logprobs`), the jitted
update (`train_step`) and host-side batch building (`batch`)."""
