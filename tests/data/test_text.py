"""Text datasets: windows and targets, positional splits, tokenizers, corpora, bad inputs."""

from __future__ import annotations

import hashlib
import sys

import pytest
import torch

import lmc.data.download as dl
import lmc.data.paths as data_paths
from lmc.config import LmcError
from lmc.data import (
    ByteTokenizer,
    CharTokenizer,
    Dataset,
    TextDataset,
    dataset_options,
    input_shape,
    load,
    load_text,
    tokenizer_from_json,
)
from lmc.data.text import (
    DEFAULT_CONTEXT,
    DEFAULT_SPLITS,
    FORTUNE_FILES,
    clean_fortune,
    fortunes_text,
    make_windows,
    split_fortunes,
    split_text,
    window_count,
)


def _write(tmp_path, text: str | bytes, name: str = "corpus.txt"):
    path = tmp_path / name
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(text)
    return path


def _listing(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


# --------------------------------------------------------------------------- windows, splits


def test_windows_and_targets_exact():
    tokens = list(range(10, 20))  # 10 tokens
    x, y = make_windows(tokens, 3, 3)
    assert x.dtype == y.dtype == torch.int64
    assert x.tolist() == [[10, 11, 12], [13, 14, 15], [16, 17, 18]]
    assert y.tolist() == [[11, 12, 13], [14, 15, 16], [17, 18, 19]]
    x, y = make_windows(tokens, 4, 2)  # overlapping: starts 0, 2, 4
    assert x.tolist() == [[10, 11, 12, 13], [12, 13, 14, 15], [14, 15, 16, 17]]
    assert torch.equal(y, x + 1)
    assert window_count(10, 4, 2) == 3 and window_count(10, 9, 1) == 1
    assert window_count(10, 10, 1) == 0 and make_windows(tokens, 10, 1)[0].shape == (0, 10)
    x[0, 0] = -1  # copies: x and y share no memory
    assert y[0].tolist() == [11, 12, 13, 14]


def test_text_file_windows_exact(tmp_path):
    text = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ!?"  # 64 chars
    path = _write(tmp_path, text)
    ds = load("text", path=str(path), tokenizer="bytes", context=5, splits=[0.5, 0.25, 0.25])
    assert isinstance(ds, TextDataset) and isinstance(ds, Dataset)
    assert ds.task == "next-token" and ds.num_classes == 256 and ds.input_shape == (5,)
    assert ds.mean == () and ds.std == () and ds.augment is False
    blocks = (text[:32], text[32:48], text[48:])
    for split, block in zip(("train", "validation", "test"), blocks):
        x, y = ds.split(split)
        ids = list(block.encode())
        n = (len(ids) - 1 - 5) // 5 + 1
        assert x.tolist() == [ids[5 * i : 5 * i + 5] for i in range(n)]
        assert y.tolist() == [ids[5 * i + 1 : 5 * i + 6] for i in range(n)]
    strided = load("text", path=str(path), tokenizer="bytes", context=5, stride=2,
                   splits=[0.5, 0.25, 0.25])  # fmt: skip
    ids = list(text[:32].encode())
    assert strided.x_train.tolist() == [ids[2 * i : 2 * i + 5] for i in range(14)]
    assert strided.stride == 2 and ds.stride == 5


def test_split_by_position():
    text = "".join(chr(ord("a") + i % 26) for i in range(200))
    train, val, test = split_text(text, [0.8, 0.1, 0.1])
    assert (train, val, test) == (text[:160], text[160:180], text[180:])
    assert split_text("x" * 10, [0.7, 0.2, 0.1]) == ("x" * 7, "x" * 2, "x")  # 0.7+0.2 -> 9
    a, b, c = split_text(text[:7], [0.5, 0.25, 0.25])  # floor(3.5) = 3, floor(5.25) = 5
    assert (len(a), len(b), len(c)) == (3, 2, 2)


def test_char_vocab_from_train_only_with_unknown_id(tmp_path):
    train = "abab cab\n" * 4  # 36 chars: vocabulary "\n", " ", a, b, c
    text = train + "abz" + "qab"  # validation "abz", test "qab"
    path = _write(tmp_path, text)
    ds = load("text", path=str(path), context=2, splits=[36 / 42, 3 / 42, 3 / 42])
    tok = ds.tokenizer
    assert tok.chars == ("\n", " ", "a", "b", "c") and tok.unknown_id == 5
    assert ds.num_classes == tok.vocab_size == 6
    assert ds.x_val.tolist() == [[2, 3]] and ds.y_val.tolist() == [[3, 5]]  # z is unknown
    assert ds.x_test.tolist() == [[5, 2]] and ds.y_test.tolist() == [[2, 3]]  # q is unknown
    assert tok.encode("cz") == [4, 5] and tok.decode([4, 5]) == "c\ufffd"
    assert tok.encode_array("c\nz").tolist() == tok.encode("c\nz")
    again = tokenizer_from_json(tok.to_json())
    assert again == tok and CharTokenizer.from_json(tok.to_json()).chars == tok.chars
    assert again.encode(text) == tok.encode(text)


def test_bytes_tokenizer_round_trip():
    tok = ByteTokenizer()
    text = "héllo ✓ naïve\n\tend"
    ids = tok.encode(text)
    assert ids == list(text.encode("utf-8")) and len(ids) > len(text)
    assert tok.decode(ids) == text and tok.vocab_size == 256
    assert tok.encode_array(text).tolist() == ids
    assert tokenizer_from_json(tok.to_json()) == tok
    with pytest.raises(LmcError, match="outside the byte vocabulary"):
        tok.decode([256])


def test_options_recorded_and_validation_split(tmp_path):
    path = _write(tmp_path, "the quick brown fox jumps over the lazy dog. " * 20)
    full = dataset_options("text", {"path": str(path)})
    assert full == {
        "path": str(path),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "tokenizer": "char",
        "context": DEFAULT_CONTEXT,
        "stride": DEFAULT_CONTEXT,
        "splits": list(DEFAULT_SPLITS),
    }
    given = dataset_options("text", {"path": str(path), "context": 8, "train_size": 3})
    assert given["stride"] == 8 and given["train_size"] == 3
    assert dataset_options("digits", {"train_size": 5}) == {"train_size": 5}  # unchanged
    assert input_shape("text", path=str(path), context=8) == (8,)
    assert input_shape("fortunes") == (DEFAULT_CONTEXT,)
    ds = load("text", **given)
    assert len(ds.y_train) == 3 and ds.name.endswith("[subset]")
    assert ds.split("validation")[0] is ds.x_val
    with pytest.raises(LmcError, match="'train', 'validation' or 'test'"):
        ds.split("val")
    moved = ds.to("meta")
    assert moved.x_val.device.type == "meta" and moved.y_val.device.type == "meta"
    assert moved.x_train.device.type == "meta" and ds.x_val.device.type == "cpu"
    assert "validation=" in repr(ds) and "tokenizer='char'" in repr(ds)


def test_an_edited_text_file_is_not_taken_for_the_recorded_one(tmp_path):
    """A run records the file's SHA-256 beside its path: editing the file changes the run's
    identity, and loading with the old record says the file changed."""
    path = _write(tmp_path, "the quick brown fox jumps over the lazy dog. " * 20)
    before = dataset_options("text", {"path": str(path), "context": 8})
    load("text", **before)
    path.write_text("a different text entirely, of some length. " * 20, "utf-8")
    after = dataset_options("text", {"path": str(path), "context": 8})
    assert after["sha256"] != before["sha256"] and after["path"] == before["path"]
    with pytest.raises(LmcError, match="has changed since it was recorded"):
        load("text", **before)
    assert input_shape("text", path=str(tmp_path / "absent.txt"), context=8) == (8,)  # no read
    with pytest.raises(LmcError, match="64 lowercase hex"):
        dataset_options("text", {"path": str(path), "sha256": "abc"})
    with pytest.raises(LmcError, match="takes no path or sha256"):
        dataset_options("fortunes", {"sha256": before["sha256"]})


# --------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    "content, match",
    [
        (b"", "is empty"),
        (b"\xef\xbb\xbf", "only a byte-order mark"),
        (b"caf\xe9 latin-1 text", "not UTF-8"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not UTF-8"),
        (b"text\x00with a NUL" * 10, "NUL"),
    ],
)
def test_bad_text_files(tmp_path, content, match):
    path = _write(tmp_path, content, "bad.txt")
    before = _listing(tmp_path)
    with pytest.raises(LmcError, match=match) as err:
        load("text", path=str(path), context=2)
    assert "\n" not in str(err.value) and str(path) in str(err.value)
    assert _listing(tmp_path) == before


def test_text_shorter_than_one_window(tmp_path):
    path = _write(tmp_path, "x" * 100)
    before = _listing(tmp_path)
    with pytest.raises(LmcError, match="the validation split .* holds 5 tokens") as err:
        load("text", path=str(path), context=5, splits=[0.9, 0.05, 0.05])
    assert "\n" not in str(err.value) and "lower context" in str(err.value)
    with pytest.raises(LmcError, match="the train split"):
        load("text", path=str(path), context=100)
    assert _listing(tmp_path) == before


@pytest.mark.parametrize(
    "options, match",
    [
        ({}, "needs the option path"),
        ({"path": "x.txt", "splits": [0.9, 0.1]}, "three fractions"),
        ({"path": "x.txt", "splits": [0.9, 0.1, 0.0]}, r"in \(0, 1\)"),
        ({"path": "x.txt", "splits": [0.8, 0.1, 0.2]}, "add up to 1.1"),
        ({"path": "x.txt", "context": 0}, "context must be at least 1"),
        ({"path": "x.txt", "stride": 1.5}, "stride must be an integer"),
        ({"path": "x.txt", "label_parts": [[1.0]]}, "takes train_size"),
        ({"path": "x.txt", "input_shape": [3]}, "unknown option.*input_shape"),
        ({"path": "x.txt", "subset_seed": 1}, "subset_seed needs train_size"),
    ],
)
def test_bad_options(tmp_path, monkeypatch, options, match):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "some text " * 50, "x.txt")
    with pytest.raises(LmcError, match=match):
        load("text", **options)


def test_missing_file_and_path_for_a_corpus(tmp_path):
    with pytest.raises(LmcError, match="no such file"):
        load("text", path=str(tmp_path / "missing.txt"))
    with pytest.raises(LmcError, match="takes no path"):
        load("fortunes", path=str(tmp_path / "x.txt"))


def test_tokenizer_folder_that_does_not_load(tmp_path, monkeypatch):
    path = _write(tmp_path, "hello world " * 30)
    with pytest.raises(LmcError, match="not 'char', 'bytes' or a folder"):
        load("text", path=str(path), tokenizer="chars")
    # transformers missing: one line naming the extra
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(LmcError, match=r"pip install 'lmc\[hf\]'"):
        load("text", path=str(path), tokenizer=str(tmp_path))


def test_hf_tokenizer_from_local_folder(tmp_path):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "again": 3}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = tmp_path / "tok"
    transformers.PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]").save_pretrained(
        str(folder)
    )
    path = _write(tmp_path, "hello world again " * 20 + "hello mars")
    ds = load("text", path=str(path), tokenizer=str(folder), context=3, splits=[0.8, 0.1, 0.1])
    assert ds.num_classes == 4 and ds.tokenizer.kind == "hf"
    assert ds.x_train[:2].tolist() == [[1, 2, 3], [1, 2, 3]]
    assert ds.y_train[0].tolist() == [2, 3, 1]
    assert 0 in ds.y_test.reshape(-1).tolist()  # "mars" is the unknown word
    again = tokenizer_from_json(ds.tokenizer.to_json())
    assert again.encode("world hello") == [2, 1]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{not json")
    (broken / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')
    with pytest.raises(LmcError, match="does not load") as err:
        load("text", path=str(path), tokenizer=str(broken), context=3)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- fortunes


def test_fortune_files_parsed_and_cleaned():
    raw = "%\nFirst one.\n%\n\n  Second,\n\tindented.\n\n%  \n%\nThird\n"
    assert split_fortunes(raw) == ["First one.", "\n  Second,\n\tindented.\n", "Third\n"]
    assert clean_fortune("\n  Second,\n\tindented.\n") == "  Second,\n\tindented."
    assert clean_fortune("_\bu_\bn_\bd_\be_\br b\bbo\bol\bld\bd\x07!") == "under bold!"
    assert clean_fortune("tab\there\r\x1b[0m\x85.") == "tab\there[0m."  # controls dropped
    assert clean_fortune("don\u00e2\u0080\u0099t") == "don\u2019t"  # UTF-8 read as Latin-1
    assert (
        clean_fortune("caf\u00e9 \u00fcber") == "caf\u00e9 \u00fcber"
    )  # real Latin-1 letters kept


def _fake_fortunes(folder):
    folder.mkdir(parents=True)
    expected = set()
    for i, name in enumerate(FORTUNE_FILES):
        items = [f"Fortune {i}.{k} of {name}.\n\t\t-- Someone" for k in range(2)]
        expected.update(items)
        body = "".join(f"{item}\n%\n" for item in items)
        if i == 0:
            body += "Fortune 1.0 of computers.\n\t\t-- Someone\n%\n"  # a repeat: kept once
        (folder / name).write_text(body, encoding="utf-8")
        (folder / f"{name}.dat").write_bytes(b"\x00\x00\x00\x02binary index")
    return expected


def test_fortunes_corpus_from_a_fake_folder(tmp_path, monkeypatch, isolated):
    folder = tmp_path / "games" / "fortunes"
    expected = _fake_fortunes(folder)
    text = fortunes_text(folder)
    parts = text[:-1].split("\n\n")
    assert sorted(parts) == sorted(expected) and len(parts) == 2 * len(FORTUNE_FILES)
    assert "%" not in text and text == fortunes_text(folder)  # one fixed order
    file_order = [f"Fortune {i}.{k} of {name}.\n\t\t-- Someone"
                  for i, name in enumerate(FORTUNE_FILES) for k in range(2)]  # fmt: skip
    assert parts != file_order  # one seeded order across the files
    monkeypatch.setattr(data_paths, "DEBIAN_FORTUNES", folder)
    ds = load("fortunes", context=16)
    assert ds.name == "fortunes" and ds.task == "next-token" and ds.x_train.shape[1] == 16
    assert ds.tokenizer.decode(ds.x_train[0].tolist()) == text[:16]
    # the same folder under a data root, Debian's location empty
    monkeypatch.setattr(data_paths, "DEBIAN_FORTUNES", tmp_path / "none")
    root = tmp_path / "games"
    assert torch.equal(load("fortunes", data_dir=root, context=16).x_test, ds.x_test)


def test_fortunes_missing_says_how_to_install(tmp_path, monkeypatch, isolated):
    monkeypatch.setattr(data_paths, "DEBIAN_FORTUNES", tmp_path / "absent")
    with pytest.raises(LmcError, match="apt-get install fortunes") as err:
        load("fortunes")
    assert "\n" not in str(err.value) and "--download" not in str(err.value)
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "fortunes").write_text("One.\n%\n")
    monkeypatch.setattr(data_paths, "DEBIAN_FORTUNES", partial)
    with pytest.raises(LmcError, match="lacks 40 of the 41 fortune files"):
        load("fortunes")


def test_debian_fortunes_package():
    folder = data_paths.DEBIAN_FORTUNES
    if not all((folder / name).is_file() for name in FORTUNE_FILES):
        pytest.skip("Debian's fortunes package is not installed (apt-get install fortunes)")
    ds = load("fortunes")
    assert ds.task == "next-token" and ds.input_shape == (DEFAULT_CONTEXT,)
    assert ds.x_train.shape[1] == DEFAULT_CONTEXT and len(ds.y_train) > 10 * len(ds.y_test)
    assert ds.num_classes == ds.tokenizer.vocab_size < 200
    assert "%\n" not in ds.tokenizer.decode(ds.x_train[:50].reshape(-1).tolist())
    assert int(ds.x_train.max()) < ds.num_classes and int(ds.y_test.min()) >= 0


# --------------------------------------------------------------------------- tiny shakespeare


def _shakespeare_mirror(tmp_path, monkeypatch, digest=None):
    data = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\n" * 40).encode()
    src = tmp_path / "mirror"
    src.mkdir()
    (src / "input.txt").write_bytes(data)
    digest = digest or hashlib.sha256(data).hexdigest()
    resource = dl.Resource(src.as_uri() + "/", {"input.txt": digest}, "sha256")
    monkeypatch.setitem(dl.TEXT_RESOURCES, "tiny-shakespeare", resource)
    return data


def test_tiny_shakespeare_download_checked(tmp_path, monkeypatch, isolated):
    assert dl.TEXT_RESOURCES["tiny-shakespeare"].base_url.endswith(
        "karpathy/char-rnn/master/data/tinyshakespeare/"
    )
    assert dl.TEXT_RESOURCES["tiny-shakespeare"].files == {"input.txt": dl.TINY_SHAKESPEARE_SHA256}
    with pytest.raises(LmcError, match="--download") as err:
        load("tiny-shakespeare")
    assert "\n" not in str(err.value)
    data = _shakespeare_mirror(tmp_path, monkeypatch)
    ds = load("tiny-shakespeare", download=True, context=32)
    folder = isolated.cache / "tiny-shakespeare"
    assert _listing(folder) == ["input.txt"] and (folder / "input.txt").read_bytes() == data
    assert ds.tokenizer.decode(ds.x_train[0].tolist()) == data.decode()[:32]
    assert torch.equal(load("shakespeare", context=32).x_val, ds.x_val)  # found in the cache
    (folder / "input.txt").write_text("another text " * 100)
    with pytest.raises(LmcError, match="is not char-rnn's tinyshakespeare"):
        load("tiny-shakespeare", context=32)


def test_tiny_shakespeare_bad_checksum_leaves_nothing(tmp_path, monkeypatch, isolated):
    _shakespeare_mirror(tmp_path, monkeypatch, digest="0" * 64)
    with pytest.raises(LmcError, match="SHA-256"):
        load("tiny-shakespeare", download=True)
    assert _listing(isolated.cache / "tiny-shakespeare") == []


def test_load_text_helper(tmp_path):
    path = _write(tmp_path, "abcdefghij" * 10)
    ds = load_text(path, tokenizer="bytes", context=4)
    assert ds.name == "corpus.txt" and torch.equal(ds.x_train, load(
        "text", path=str(path), tokenizer="bytes", context=4).x_train)  # fmt: skip
