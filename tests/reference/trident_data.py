"""Trident's token files and sample order, written again from their documentation.

Nothing here imports or calls Trident: the file format is NOTE [token file
format] in datasets/token_file.h, the order is the rule written out in
datasets/README.md ("Sample order"). The reference trainer uses this to
feed transformers' GPT-2 the very micro-batches Trident trains on.
"""

import struct

import numpy as np

MASK64 = (1 << 64) - 1
HEADER_BYTES = 128
MAGIC = b"TRIDTOK\0"


class TokenFile:
    """A PREFIX.{train,val}.bin file: header fields and the tokens as int64."""

    def __init__(self, path):
        with open(path, "rb") as f:
            raw = f.read()
        if len(raw) < HEADER_BYTES or raw[:8] != MAGIC:
            raise ValueError(f"{path}: not a Trident token file (magic {raw[:8]!r})")
        version, dtype_bytes, count, docs, vocab, eot = struct.unpack_from("<IIQQII", raw, 8)
        if version != 1 or dtype_bytes not in (2, 4):
            raise ValueError(f"{path}: version {version}, {dtype_bytes} bytes per token: expected version 1, 2 or 4")
        dtype = np.dtype("<u2") if dtype_bytes == 2 else np.dtype("<u4")
        if len(raw) != HEADER_BYTES + count * dtype_bytes:
            raise ValueError(f"{path}: header says {count} tokens but the file has {len(raw)} bytes")
        self.path = path
        self.vocab_size = vocab
        self.end_of_text = eot
        self.doc_count = docs
        self.tokenizer = raw[40:72].rstrip(b"\0").decode()
        self.tokens = np.frombuffer(raw, dtype=dtype, offset=HEADER_BYTES, count=count).astype(np.int64)


def splitmix64(state):
    """One step of splitmix64: returns (new_state, output), both uint64."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def uniform_below(state, bound):
    """Uniform integer in [0, bound) by rejection: (new_state, value)."""
    limit = MASK64 - MASK64 % bound
    while True:
        state, r = splitmix64(state)
        if r < limit:
            return state, r % bound


def epoch_order(seed, epoch, num_samples):
    """The permutation of sample indices that epoch `epoch` visits (Fisher-Yates)."""
    order = list(range(num_samples))
    state = (seed ^ ((0xD1B54A32D192ED03 * (epoch + 1)) & MASK64)) & MASK64
    state, _ = splitmix64(state)  # one output discarded
    for i in range(num_samples - 1, 0, -1):
        state, j = uniform_below(state, i + 1)
        order[i], order[j] = order[j], order[i]
    return order


class MicroBatches:
    """A data-parallel rank's micro-batch: its slice of global_batch (defined by the subclass)."""

    def micro_batch(self, step, global_batch_size, dp_rank, dp, micro_index, micro_batch_size):
        per_rank = global_batch_size // dp
        g = self.global_batch(step, global_batch_size)
        begin = dp_rank * per_rank + micro_index * micro_batch_size
        return g[begin:begin + micro_batch_size]


class Samples(MicroBatches):
    """Fixed windows of a token stream in Trident's seeded order."""

    def __init__(self, tokens, seq_len, seed):
        self.tokens = tokens
        self.seq_len = seq_len
        self.seed = seed
        self.num_samples = (len(tokens) - 1) // seq_len
        if self.num_samples < 1:
            raise ValueError(f"{len(tokens)} tokens hold no window of seq_len + 1 = {seq_len + 1}")
        self._orders = {}

    def _order(self, epoch):
        if epoch not in self._orders:
            self._orders[epoch] = epoch_order(self.seed, epoch, self.num_samples)
        return self._orders[epoch]

    def global_batch(self, step, global_batch_size):
        """Sample indices of optimizer step `step` (from 0): positions step*G .. step*G+G-1."""
        out = []
        for j in range(global_batch_size):
            pos = step * global_batch_size + j
            out.append(self._order(pos // self.num_samples)[pos % self.num_samples])
        return out

    def window(self, i):
        """Sample i: seq_len + 1 tokens starting at i * seq_len."""
        start = i * self.seq_len
        return self.tokens[start:start + self.seq_len + 1]


class Blend(MicroBatches):
    """Datasets mixed by weight: NOTE [blended sample order] in datasets/dataset.h.

    Position p goes to the dataset d with the largest w_d * max(p, 1) - c_d(p) (weights
    normalised to sum 1, c_d(p) the positions before p that went to d, the lowest d on a
    tie: megatron-core's build_blending_indices), and is the c_d(p)-th sample of d's own
    order, seeded by seed + d * 0x9E3779B97F4A7C15. A sample id is d's own index plus the
    samples of the datasets before d. One dataset is exactly Samples.
    """

    def __init__(self, weighted_tokens, seq_len, seed):
        total = sum(float(w) for w, _ in weighted_tokens)
        self.weights = [float(w) / total for w, _ in weighted_tokens]
        self.parts = [Samples(t, seq_len, (seed + d * 0x9E3779B97F4A7C15) & MASK64)
                      for d, (_, t) in enumerate(weighted_tokens)]
        self.first = [sum(p.num_samples for p in self.parts[:d]) for d in range(len(self.parts))]
        self.choice, self.counts = [], [0] * len(self.parts)  # (d, k) of positions 0, 1, ...

    def _at(self, pos):
        while len(self.choice) <= pos:
            p = len(self.choice)
            at = max(float(p), 1.0)
            errors = [w * at - c for w, c in zip(self.weights, self.counts)]
            d = errors.index(max(errors))  # the first of equal maxima
            self.choice.append((d, self.counts[d]))
            self.counts[d] += 1
        return self.choice[pos]

    def global_batch(self, step, global_batch_size):
        out = []
        for j in range(global_batch_size):
            d, k = self._at(step * global_batch_size + j)
            part = self.parts[d]
            out.append(self.first[d] + part._order(k // part.num_samples)[k % part.num_samples])
        return out

    def window(self, i):
        d = max(k for k in range(len(self.parts)) if self.first[k] <= i)
        return self.parts[d].window(i - self.first[d])


def write_token_file(path, tokens, vocab_size, tokenizer, end_of_text=0xFFFFFFFF, doc_count=1):
    """Writes a token file as NOTE [token file format] describes (uint16 up to vocab 65536)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size})")
    dtype_bytes = 2 if vocab_size <= 65536 else 4
    header = MAGIC + struct.pack("<IIQQII", 1, dtype_bytes, tokens.size, doc_count, vocab_size, end_of_text)
    header += tokenizer.encode().ljust(32, b"\0")
    header = header.ljust(HEADER_BYTES, b"\0")
    with open(path, "wb") as f:
        f.write(header)
        f.write(tokens.astype("<u2" if dtype_bytes == 2 else "<u4").tobytes())


def reference_args(description=None):
    """The arguments every reference test takes (--trident, --source-dir, --work), parsed;
    the work folder is emptied and made afresh, absolute."""
    import argparse
    import os
    import shutil
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trident", required=True, help="the built trident")
    ap.add_argument("--source-dir", required=True, help="the repository root")
    ap.add_argument("--work", required=True, help="a scratch folder (emptied first)")
    args = ap.parse_args()
    args.work = os.path.abspath(args.work)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    return args


def megatron_core_train_samples(prefixes, weights, split, seq_len, seed, num_samples, vocab_size, cache=None,
                                documents=(False, False, False)):
    """megatron-core's own train split of Megatron datasets: BlendedMegatronDatasetBuilder with a
    GPTDatasetConfig (megatron-core's NullTokenizer), the way Megatron's pretrain_gpt builds it.
    prefixes with weights None is `--data-path PREFIX` (one dataset: a GPTDataset alone);
    weights given is `--data-path W1 PREFIX1 ...` (a BlendedDataset). Returns the dataset:
    item p has "tokens" and "labels" (torch int64, seq_len each). documents: reset_position_ids,
    reset_attention_mask, eod_mask_loss (the NullTokenizer's eod is vocab_size)."""
    import warnings
    warnings.filterwarnings("ignore")  # megatron-core warns that Transformer Engine and Apex are absent
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer
    config = GPTDatasetConfig(random_seed=seed, sequence_length=seq_len, blend=(prefixes, weights), split=split,
                              tokenizer=NullTokenizer(vocab_size), reset_position_ids=documents[0],
                              reset_attention_mask=documents[1], eod_mask_loss=documents[2], path_to_cache=cache)
    # Only the train split is built: valid and test do not enter its indices (each split has its
    # own RandomState), and megatron-core loops forever on a split without tokens, which a blend of
    # few documents cut by "969,30,1" has. The train book-ends stay those of `split`.
    config.split_matrix = [config.split_matrix[0], None, None]
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [num_samples, 0, 0], lambda: True, config).build()
    return train


class MegatronSampler:
    """Megatron's MegatronPretrainingSampler (megatron/training/datasets/data_samplers.py):
    positions consumed in order, batches of dp * mbs consecutive positions, rank r taking
    the r-th mbs of each; micro_batch() answers as trident_data.Blend's does."""

    def __init__(self, dataset):
        self.dataset = dataset

    def micro_batch(self, step, gbs, rank, dp, k, mbs):
        first = step * gbs + k * dp * mbs + rank * mbs
        return list(range(first, first + mbs))

    def window(self, i):
        item = self.dataset[i]
        return np.concatenate([item["tokens"].numpy(), item["labels"].numpy()[-1:]])

    def mask_window(self, i, masks):
        """The loss-mask bytes (NOTE [loss-mask file]) of window i: megatron-core's own walk over
        the sample's documents, reading a view of the dataset's mask (masks[d], one byte per token
        of PREFIX.bin) in place of its tokens."""
        ds, k, d = self.dataset, i, 0
        if hasattr(ds, "dataset_index"):  # a BlendedDataset: its d-th GPTDataset's k-th sample
            d, k = int(ds.dataset_index[i]), int(ds.dataset_sample_index[i])
            ds = ds.datasets[d]
        tokens = ds.dataset
        ds.dataset = _MaskView(np.array(tokens.sequence_lengths, dtype=np.int64), masks[d])
        try:
            text, _ = ds._query_document_sample_shuffle_indices(k)
        finally:
            ds.dataset = tokens
        return np.asarray(text, dtype=np.int64)


class _MaskView:
    """IndexedDataset.get over a mask laid out as the dataset's tokens."""

    def __init__(self, lengths, mask):
        self.starts = np.concatenate([[0], np.cumsum(lengths)])
        self.mask = mask

    def get(self, idx, offset=0, length=None):
        begin = int(self.starts[idx]) + offset
        end = int(self.starts[idx + 1]) if length is None else begin + length
        return self.mask[begin:end]


def read_loss_mask(prefix, tokens):
    """PREFIX.lossmask (NOTE [loss-mask file] in datasets/documents.h): one byte per token."""
    path = prefix + ".lossmask"
    with open(path, "rb") as f:
        head = f.read(16)
    count = struct.unpack_from("<Q", head, 8)[0]
    if head[:8] != b"TRDLMSK1" or count != tokens:
        raise ValueError(f"{path}: magic {head[:8]!r}, {count} tokens: expected TRDLMSK1 and {tokens}")
    return np.fromfile(path, np.uint8, offset=16).astype(np.int64)
