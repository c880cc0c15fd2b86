"""Record the key training data of a small GRPO-style RL loop with msprobe's own saver, for `precheck keydata`.

msprobe's RL key-data dump (MindSpeed-RL's and verl's ``key_data_dump``) is ``msprobe.core.SingleSave``: every
named tensor of a step lands in ``DUMP/data/<name>/step<N>/rank<R>/micro_step<M>/<name>.npy`` beside a
``<name>.json`` of its statistics. This loop saves what those frameworks save (prompts, responses, old_log_prob,
ref_log_prob, log_prob, advantages, kl_loss, loss) for a few steps of a tiny policy. A variant may patch in a bug
from a given step on: ``log_prob_bf16`` computes the policy's log-probabilities in bf16 (a kernel that rounds
early), so the runs part in the log-probabilities while prompts and responses still agree; ``top_k_sampling``
samples the responses from the 8 likeliest tokens only (a generation setting that differs between two runs), so
the runs part in the sampled tokens.

Run it in a throwaway venv (pip install torch==2.13.0 mindstudio-probe):
    .venv/bin/python tests/data/recipes/msprobe_venv.py -- \\
        benchmarks/keydata_record.py OUT_DIR VARIANT [--steps 3] [--bug-step 1]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

VARIANTS = ("clean", "log_prob_bf16", "top_k_sampling")
VOCAB, HIDDEN, PROMPTS, PROMPT_LEN, RESPONSE_LEN = 48, 32, 4, 6, 8


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="the dump folder (msprobe's dump_path)")
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--bug-step", type=int, default=1, help="the first step the variant's bug acts in")
    return parser


class Policy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.mix = torch.nn.Linear(HIDDEN, HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        h = torch.cumsum(h, dim=1) / torch.arange(1, ids.shape[1] + 1).view(1, -1, 1)  # a causal mean of the past
        return self.head(torch.tanh(self.mix(h)))


def log_probs(model: Policy, ids: torch.Tensor, buggy: bool) -> torch.Tensor:
    """log p(token t | tokens < t) of every response token."""
    logits = model(ids[:, :-1])[:, PROMPT_LEN - 1 :]
    if buggy:
        logits = logits.bfloat16()
    chosen = ids[:, PROMPT_LEN:]
    return torch.gather(F.log_softmax(logits, dim=-1), 2, chosen.unsqueeze(-1)).squeeze(-1).float()


def sample(model: Policy, prompts: torch.Tensor, generator: torch.Generator, buggy: bool) -> torch.Tensor:
    ids = prompts
    with torch.no_grad():
        for _ in range(RESPONSE_LEN):
            logits = model(ids)[:, -1]
            if buggy:
                logits = logits.masked_fill(logits < logits.topk(8, dim=-1).values[:, -1:], float("-inf"))
            probs = torch.softmax(logits, dim=-1)
            ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], dim=1)
    return ids


def main() -> None:
    args = build_parser().parse_args()
    from msprobe.core import SingleSave

    SingleSave(args.out)
    torch.manual_seed(0)
    policy, reference = Policy(), Policy()
    reference.load_state_dict(policy.state_dict())
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
    for step in range(args.steps):
        buggy = args.variant == "log_prob_bf16" and step >= args.bug_step
        bad_sampling = args.variant == "top_k_sampling" and step >= args.bug_step
        generator = torch.Generator().manual_seed(100 + step)
        prompts = torch.randint(0, VOCAB, (PROMPTS, PROMPT_LEN), generator=generator)
        ids = sample(policy, prompts, generator, bad_sampling)
        rewards = (ids[:, PROMPT_LEN:] % 2 == 0).float().mean(dim=1)  # reward: the share of even tokens
        advantages = ((rewards - rewards.mean()) / (rewards.std() + 1e-6)).unsqueeze(1).expand(-1, RESPONSE_LEN)
        with torch.no_grad():
            old_log_prob = log_probs(policy, ids, buggy)
            ref_log_prob = log_probs(reference, ids, False)
        log_prob = log_probs(policy, ids, buggy)
        ratio = torch.exp(log_prob - old_log_prob)
        kl = torch.exp(ref_log_prob - log_prob) - (ref_log_prob - log_prob) - 1  # the k3 estimator
        kl_loss = kl.mean()
        loss = -(ratio * advantages).mean() + 0.1 * kl_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        for i in range(PROMPTS):  # one micro step per prompt, as the frameworks save a batch's texts one by one
            SingleSave.save({"prompts": prompts[i]})
            SingleSave.save({"responses": ids[i, PROMPT_LEN:]})
        for name, value in (("old_log_prob", old_log_prob), ("ref_log_prob", ref_log_prob),
                            ("log_prob", log_prob.detach()), ("advantages", advantages), ("kl_loss", kl_loss.detach()),
                            ("loss", loss.detach())):  # fmt: skip
            SingleSave.save({name: value})
        SingleSave.step()
    print("key data written under", args.out)


if __name__ == "__main__":
    main()
