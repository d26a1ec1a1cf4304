"""A HuggingFace ``Trainer`` script as users write them (a small causal LM on random tokens), for the
``command`` workload: accelerate wraps its optimizer, and benchbay's probe still sees each step.

    python suites/examples/hf_trainer_train.py --batch-size 8 --max-steps 30 [--bf16] [--workers 2]
"""

import argparse
import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, size: int, length: int, vocab: int):
        self.tokens = torch.randint(0, vocab, (size, length), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, i):
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-steps", type=int, default=30)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--length", type=int, default=64)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--bf16", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=args.width, intermediate_size=4 * args.width,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=args.length)
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(
            output_dir=out, per_device_train_batch_size=args.batch_size, max_steps=args.max_steps,
            logging_steps=1, save_strategy="no", report_to=[], bf16=args.bf16,
            dataloader_num_workers=args.workers, use_cpu=not torch.cuda.is_available(), disable_tqdm=True)
        data = RandomTokens(args.batch_size * args.max_steps, args.length, config.vocab_size)
        Trainer(model=LlamaForCausalLM(config), args=training, train_dataset=data).train()


if __name__ == "__main__":
    main()
