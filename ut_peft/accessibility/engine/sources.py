"""Sequence sources for the accessibility sweep: natural text, random words, random token ids.

Every source draws sequence ``index`` of length ``n`` from a generator seeded by ``(seed, n, index)`` alone,
so a sequence is the same whichever process draws it, in whatever order, and it is shared by all m.

Source specs (strings the recipe accepts):
  ``text``                      natural English: the CPython language reference (``pydoc_data.topics``),
                                embedded in every Python, no download
  ``text:PATH``                 a local UTF-8 text file, or a JSONL file with a ``"text"`` field per line (the
                                description records the file's sha256, so a resume refuses an edited file)
  ``hf:NAME[:SPLIT[:COLUMN]]``  a ``datasets`` dataset (hub name or a folder saved with ``save_to_disk``); a hub
                                name without a network only where the datasets cache holds it (else refused at once,
                                :func:`hub_dataset_problem`)
  ``words`` / ``words:PATH``    uniformly drawn words joined by spaces, tokenized and cut to n tokens; the
                                default list is every distinct alphabetic word (3+ letters, lower-cased) of
                                ``pydoc_data.topics``; PATH is a file with one word per line (its sha256 recorded)
  ``words:glove``               the published protocol's random words (its default ``words``): the first 100k
                                words of the GloVe 6B vocabulary, shipped with ut-peft (``data/README.md``)
  ``words:wordfreq``            the same kind of list from the ``wordfreq`` wheel (``pip install wordfreq``): the
                                100k most frequent English words, not the paper's list
  ``tokens``                    uniformly random token ids over the whole vocabulary

How a words text is drawn (``words_per_token``, :class:`WordsSource`): the published construction, 5 n words at once
cut to n tokens as the published code does, for ``words:glove`` and, under the published protocol
(``SweepConfig.make_source``), for every list; else words drawn n at a time until the text holds n tokens (ut-peft's
older construction, which a folder whose description records no ``words_per_token`` was crammed with).
"""

from __future__ import annotations

import bisect
import codecs
import hashlib
import json
import re
from importlib import resources
from pathlib import Path

import numpy as np

# Distinct streams for distinct uses of one seed, so a sequence and an init never share random numbers.
_SEQUENCE_STREAM = 0x5E9
_INIT_STREAM = 0x1417


def sequence_rng(seed: int, n: int, index: int) -> np.random.Generator:
    return np.random.default_rng([_SEQUENCE_STREAM, seed, n, index])


def init_seed(seed: int, m: int, n: int, index: int) -> int:
    """The seed of the memory-vector init of one (m, n, index) job; independent of process count and order."""
    return int(np.random.SeedSequence([_INIT_STREAM, seed, m, n, index]).generate_state(1, np.uint64)[0] >> 1)


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class SequenceSource:
    """Base class: ``sequence(n, index, seed)`` returns n token ids."""

    kind = "base"

    def describe(self) -> dict:
        """What identifies the source in a run's settings (a different description means different sequences)."""
        return {"kind": self.kind}

    def max_length(self) -> int | None:
        return None

    def sequence(self, n: int, index: int, seed: int) -> list[int]:
        raise TypeError(f"{type(self).__name__} must define sequence()")

    def check_length(self, n: int) -> None:
        limit = self.max_length()
        if limit is not None and n > limit:
            raise ValueError(
                f"the {self.kind} source holds only {limit} tokens, too short for sequences of "
                f"{n} tokens; give a longer text or use shorter lengths"
            )


class TextSource(SequenceSource):
    """Windows of n consecutive tokens of a tokenized corpus.

    Not ``nested`` (ut-peft's protocol): a window at a random offset drawn for every (n, index). ``nested`` (the
    published protocol): sequence ``index`` is one text, the tokens from a text start chosen for that index alone up to
    the next document's start (with ``chunk_tokens``, the next text's), and every length takes a prefix of it, so the
    rows of one index are nested prefixes of the same text (as the published code truncates each of its 20 chunks to
    every length). The text starts are the documents' starts (but for documents that start within ``NESTED_RESERVE``
    tokens, or a quarter of the corpus, of its end: they are no text's tokens), or with ``chunk_tokens`` the starts of
    disjoint texts of consecutive whole paragraphs, each at least that many tokens: many more texts from one corpus,
    for designs that draw a fresh text for every row (pooled, sequential), whose rows must not share tokens (two rows
    of one text would not be independent draws). Either way an index past the last text is an error, never a text used
    again, and so is a length that would run a text's row past its end (:meth:`text_end`): rows of two texts never
    share tokens, and a document's text takes no other document's.

    ``sha256``: the digest of the file the documents were read from (``text:PATH``), recorded in the description so
    that a folder refuses to resume on an edited file (its rows would mix two corpora); None for the built-in text and
    datasets (a ``datasets`` dataset's name holds its own fingerprint).
    """

    kind = "text"
    NESTED_RESERVE = 1024  # a nested text's start leaves at least this many tokens (the adaptive grid's reach)

    def __init__(
        self,
        tokenizer,
        documents: list[str],
        name: str,
        nested: bool = False,
        chunk_tokens: int | None = None,
        sha256: str | None = None,
    ):
        documents = [d for d in documents if d and d.strip()]
        if not documents:
            raise ValueError(f"the text source {name!r} is empty; give a file or dataset with some text")
        if chunk_tokens is not None and not nested:
            raise ValueError(
                "text chunks (--text-chunks) divide nested texts, which only the published protocol uses; "
                "under the ut-peft protocol every row is already a window at its own random offset"
            )
        if chunk_tokens is not None and (
            isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int) or chunk_tokens < 2
        ):
            raise ValueError(f"text chunks must be at least 2 tokens long (got {chunk_tokens!r})")
        self.name, self.sha256 = name, sha256
        self.nested = nested
        self.chunk_tokens = None if chunk_tokens is None else int(chunk_tokens)
        ids: list[int] = []
        if self.chunk_tokens is None:
            starts: list[int] = []
            for doc in documents:
                starts.append(len(ids))
                ids.extend(_encode(tokenizer, doc.strip() + "\n\n"))
            self.ids = np.asarray(ids, dtype=np.int64)
            reserve = min(self.NESTED_RESERVE, self.ids.size // 4)
            self.text_starts = [s for s in starts if self.ids.size - s >= reserve] or [0]
            # A text ends where its document does: the documents too near the end to open a text are no text's.
            self.text_bounds = starts
            return
        # A text opens at a paragraph start and takes whole paragraphs until it holds chunk_tokens; a last text
        # shorter than that is left out (its tokens stay in the corpus).
        self.text_starts, start = [], 0
        for doc in documents:
            for paragraph in re.split(r"\n\s*\n", doc.strip()):
                if paragraph.strip():
                    ids.extend(_encode(tokenizer, paragraph.strip() + "\n\n"))
                    if len(ids) - start >= self.chunk_tokens:
                        self.text_starts.append(start)
                        start = len(ids)
        self.ids = np.asarray(ids, dtype=np.int64)
        self.text_bounds = self.text_starts
        if not self.text_starts:
            raise ValueError(
                f"the text source {name!r} holds {self.ids.size} tokens, less than one text of "
                f"{self.chunk_tokens}; give smaller text chunks or a longer text"
            )

    def describe(self) -> dict:
        description = {"kind": self.kind, "name": self.name, "num_tokens": int(self.ids.size)}
        if self.nested:
            description["nested"] = True
        if self.chunk_tokens is not None:
            description.update(chunk_tokens=self.chunk_tokens, num_texts=len(self.text_starts))
        if self.sha256 is not None:
            description["sha256"] = self.sha256
        return description

    def max_length(self) -> int:
        return int(self.ids.size)

    def text_start(self, index: int, seed: int) -> int:
        """Where nested text ``index`` starts: a seeded permutation of the text starts, so texts are distinct."""
        count = len(self.text_starts)
        if not 0 <= index < count:
            unit = "document starts" if self.chunk_tokens is None else f"texts of {self.chunk_tokens}+ tokens"
            raise ValueError(
                f"the nested text source {self.name!r} holds {count} distinct texts ({unit}) and sequence index "
                f"{index} asks for text {index + 1}; reusing a text would make rows that should be independent "
                "share it. Use fewer sequences, or more texts: smaller text chunks (--text-chunks TOKENS: "
                f"paragraph-aligned texts of at least TOKENS, at most {self.ids.size // 512} of 512 here) or a "
                "longer corpus (text:PATH, hf:NAME)"
            )
        order = np.random.default_rng([_SEQUENCE_STREAM, seed]).permutation(count)
        return self.text_starts[int(order[index])]

    def text_end(self, start: int) -> int:
        """Where the nested text that opens at ``start`` ends: at the next document's start (text chunks: the next
        text's), or the corpus end."""
        later = bisect.bisect_right(self.text_bounds, start)
        return self.text_bounds[later] if later < len(self.text_bounds) else int(self.ids.size)

    def sequence(self, n, index, seed):
        self.check_length(n)
        if self.nested:
            start = self.text_start(index, seed)
            held = self.text_end(start) - start
            if n > held:  # its row would run into the next text: two texts' rows would share tokens
                unit = "document" if self.chunk_tokens is None else f"text of {self.chunk_tokens}+ tokens"
                raise ValueError(
                    f"nested text {index} of the source {self.name!r} (a {unit}) holds {held} tokens before the next "
                    f"text begins, fewer than the {n} its row asks for: the row would take tokens of another text, "
                    f"and rows of two texts that share tokens are not independent draws. Use lengths up to {held}, "
                    f"or longer texts: --text-chunks {n} or more (paragraph-aligned texts, at most "
                    f"{self.ids.size // n} of {n} tokens here), or a corpus of longer documents (text:PATH, hf:NAME)"
                )
        else:
            start = int(sequence_rng(seed, n, index).integers(0, self.ids.size - n + 1))
        return self.ids[start : start + n].tolist()


class WordsSource(SequenceSource):
    """Random texts of uniformly drawn words (with replacement), joined by single spaces, tokenized, cut to n tokens.

    ``words_per_token`` set (the published construction): a text of n tokens draws ``words_per_token * n`` words at
    once, the whole text is tokenized and its first n tokens kept, as the published code does with 5. Not set
    (ut-peft's older construction, which committed folders replay): words are drawn n at a time until the text
    holds n tokens. ``sha256`` is the word file's digest (the GloVe list's, or a ``words:PATH`` file's), recorded in
    the description so that a run names its list and a folder refuses to resume on an edited file.
    """

    kind = "words"

    def __init__(
        self,
        tokenizer,
        words: list[str],
        name: str,
        *,
        words_per_token: int | None = None,
        sha256: str | None = None,
    ):
        words = [w for w in dict.fromkeys(w.strip() for w in words) if w]
        if len(words) < 2:
            raise ValueError(f"the word list {name!r} has {len(words)} distinct words; give at least 2")
        if words_per_token is not None and (
            isinstance(words_per_token, bool) or not isinstance(words_per_token, int) or words_per_token < 1
        ):
            raise ValueError(f"words_per_token must be a positive integer (got {words_per_token!r})")
        self.tokenizer, self.words, self.name = tokenizer, words, name
        self.words_per_token, self.sha256 = words_per_token, sha256

    def describe(self) -> dict:
        description: dict = {"kind": self.kind, "name": self.name, "num_words": len(self.words)}
        if self.words_per_token is not None:
            description["words_per_token"] = self.words_per_token
        if self.sha256 is not None:
            description["sha256"] = self.sha256
        return description

    def drawn_words(self, n: int, index: int, seed: int) -> list[str]:
        """The words of the text of n tokens, for the published construction (``words_per_token`` set)."""
        per_token = self.words_per_token
        if per_token is None:
            raise ValueError(f"the word list {self.name!r} draws words n at a time; it has no fixed text of words")
        rng = sequence_rng(seed, n, index)
        return [self.words[i] for i in rng.integers(0, len(self.words), per_token * n)]

    def published_sequence(self, n: int, index: int, seed: int, special_ids: list[int]) -> list[int]:
        """The published code's row of n tokens: the drawn words tokenized with the tokenizer's special tokens
        (``special_ids`` first), cut to n. The tokenizer's own special tokens are not re-added here, so a row is
        the same whether the tokenizer was loaded with or without a post-processor."""
        words = self.drawn_words(n, index, seed)
        ids = list(special_ids) + _encode(self.tokenizer, " ".join(words))
        if len(ids) < n:
            raise ValueError(f"{len(words)} words of {self.name!r} make only {len(ids)} tokens, fewer than {n}")
        return ids[:n]

    def sequence(self, n, index, seed):
        if self.words_per_token is not None:
            return self.published_sequence(n, index, seed, [])
        rng = sequence_rng(seed, n, index)
        drawn: list[str] = []
        ids: list[int] = []
        while len(ids) < n:  # every word costs at least one token, so n more words always suffice
            drawn.extend(self.words[i] for i in rng.integers(0, len(self.words), n))
            ids = _encode(self.tokenizer, " ".join(drawn))
        return ids[:n]


class TokensSource(SequenceSource):
    kind = "tokens"

    def __init__(self, vocab_size: int):
        self.vocab_size = int(vocab_size)

    def describe(self) -> dict:
        return {"kind": self.kind, "vocab_size": self.vocab_size}

    def sequence(self, n, index, seed):
        return sequence_rng(seed, n, index).integers(0, self.vocab_size, n).tolist()


def default_documents() -> list[str]:
    from pydoc_data.topics import topics

    return [topics[key] for key in sorted(topics)]


def default_words() -> list[str]:
    words: set[str] = set()
    for doc in default_documents():
        words.update(w.lower() for w in re.findall(r"[A-Za-z]{3,}", doc))
    return sorted(words)


# The word lists a bare name gives (words:NAME, make_source); any other words:X is a file of words.
BUNDLED_WORD_LISTS = ("glove", "wordfreq", "pydoc_data")

# Words a published-code text draws per token of its row (generate_embeddings.py: L * 5 words, cut to L tokens).
PUBLISHED_WORDS_PER_TOKEN = 5
# words_per_token left to the default construction: make_source's is the list's (the published one for the paper's
# list, words:glove; ut-peft's older one for the others), SweepConfig's the protocol's (the published one for every
# list under the published protocol).
AUTO_WORDS_PER_TOKEN = "auto"


def check_words_per_token(words_per_token) -> None:
    """ValueError unless ``words_per_token`` names a construction: "auto" (:data:`AUTO_WORDS_PER_TOKEN`), None (words
    drawn n at a time) or a positive integer (that many words per token, drawn at once)."""
    if words_per_token in (AUTO_WORDS_PER_TOKEN, None):
        return
    if isinstance(words_per_token, bool) or not isinstance(words_per_token, int) or words_per_token < 1:
        raise ValueError(
            f"words_per_token must be a positive integer (words drawn per token of a row, at once, as the published "
            f"code draws {PUBLISHED_WORDS_PER_TOKEN}), None (words drawn n at a time, ut-peft's older construction) "
            f'or "auto" (the protocol\'s), not {words_per_token!r}'
        )


def list_words_per_token(word_list: str, words_per_token=AUTO_WORDS_PER_TOKEN) -> int | None:
    """The construction a words source of ``word_list`` (``words:NAME``'s NAME, or a file's path) is built with:
    ``words_per_token`` where it names one, else (``"auto"``) the published one for the paper's list and ut-peft's
    older one (None) for the others."""
    check_words_per_token(words_per_token)
    if words_per_token != AUTO_WORDS_PER_TOKEN:
        return words_per_token
    return PUBLISHED_WORDS_PER_TOKEN if word_list == "glove" else None


GLOVE_WORDS_FILE = "glove-6b-vocab-100k.txt"
GLOVE_WORDS_SHA256 = "e52a405502a79f6c6fd70f1ba18818775001af8485088b8fc018cd645e28570e"
GLOVE_WORDS_NAME = "glove-6b:100000"


def glove_words() -> tuple[list[str], str]:
    """The published protocol's word list (the first 100k words of GloVe 6B, shipped in ``data/``) and its sha256.

    The digest is checked, so a damaged or edited copy is an error rather than a silently different list.
    """
    data = resources.files("ut_peft.accessibility").joinpath("data").joinpath(GLOVE_WORDS_FILE).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != GLOVE_WORDS_SHA256:
        raise ValueError(
            f"ut_peft/accessibility/data/{GLOVE_WORDS_FILE} has sha256 {digest}, not the published list's "
            f"{GLOVE_WORDS_SHA256}: the installed copy is damaged or edited; reinstall ut-peft"
        )
    # Split on newlines only: str.splitlines would also split at the Unicode line separators some entries hold.
    return [w for w in data.decode("utf-8").split("\n") if w], digest


def wordfreq_words(count: int = 100_000) -> list[str]:
    """The ``count`` most frequent English words of the ``wordfreq`` wheel (the kind of list the published protocol
    draws from; its own list is ``words:glove``)."""
    try:
        import wordfreq
    except ImportError:
        raise ModuleNotFoundError(
            "the words:wordfreq source (the 100k most frequent English words) needs the wordfreq wheel: pip install "
            'wordfreq (or pip install "ut-peft[paper]"); the paper\'s own list, words:glove, ships with ut-peft'
        ) from None
    return wordfreq.top_n_list("en", count)


TEXT_FILE = "a UTF-8 text or JSONL file"
WORDS_FILE = "a file of words, one a line"


def _read(path: str) -> str:
    return _read_file(path)[0]


def _read_file(path: str, what: str = TEXT_FILE) -> tuple[str, str]:
    """The UTF-8 text of the file at ``path`` and the sha256 of its bytes (read once: the digest is of that text),
    which settings.json records for a ``text:PATH`` or ``words:PATH`` source; ``what``: the file it should be, for
    the error where it is not."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"cannot read {path!r}: no such file")
    try:
        data = file.read_bytes()
    except OSError as err:
        raise ValueError(f"cannot read {path!r}: {err}") from None
    problem = text_file_problem(data, path, what)
    if problem is not None:
        raise ValueError(problem)
    return data.decode("utf-8"), hashlib.sha256(data).hexdigest()


def text_file_problem(data: bytes, path, what: str = TEXT_FILE, *, whole: bool = True) -> str | None:
    """Why the bytes ``data`` of the file ``path`` are not UTF-8 text, in one line that says what to do (``what``:
    the file to give instead); None where they are. ``whole=False``: ``data`` is the file's start, which may end
    inside a character. A NUL byte is never text: a UTF-16 file without its byte-order mark decodes as UTF-8 with
    a NUL after every ASCII letter, and would be crammed so."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoder.decode(data, final=whole)
    except UnicodeDecodeError as err:
        found = f"byte 0x{data[err.start]:02x} at offset {err.start} is not UTF-8"
    else:
        nul = data.find(b"\0")
        if nul < 0:
            return None
        found = f"a NUL byte at offset {nul}"
    return (
        f"{path} is not UTF-8 text ({found}: a binary file, or text in another encoding such as UTF-16 or Latin-1); "
        f"give {what}, converting text in another encoding first (iconv -f ENCODING -t UTF-8 {path} > NEW.txt)"
    )


def read_documents(path: str, text: str | None = None) -> list[str]:
    """The documents of the file at ``path`` (its whole text, or a JSONL file's ``"text"`` fields); ``text``: the
    file's text where the caller read it already."""
    text = _read(path) if text is None else text
    if not path.endswith((".jsonl", ".json")):
        return [text]
    docs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(
                f'{path}:{number} is not valid JSON ({err}); each line must be an object with a "text" field'
            ) from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise ValueError(f'{path}:{number} has no string "text" field')
        docs.append(record["text"])
    return docs


def dataset_documents(dataset, column: str = "text") -> list[str]:
    if column not in dataset.column_names:
        raise ValueError(
            f"the dataset has no column {column!r} (columns: {', '.join(dataset.column_names)}); "
            "name the text column in the source spec, hf:NAME:SPLIT:COLUMN"
        )
    return list(dataset[column])


def hub_dataset_problem(name: str) -> str | None:
    """Why the dataset ``name`` of an ``hf:`` source cannot be loaded here and now, as one line that says what to do;
    None where loading it can go ahead: a local folder, a copy in the local ``datasets`` cache (which load_dataset
    falls back to without a network), or a Hub that answers (whatever it answers: a dataset it lacks, a gated one,
    a bad name, which load_dataset's own error says).

    Without a network, load_dataset retries the Hub for about 23 s before it fails with 'Couldn't reach ... on the
    Hub'; one request here (10 s at most) tells it in a second. Offline mode (HF_HUB_OFFLINE, HF_DATASETS_OFFLINE,
    as ``datasets.config.HF_HUB_OFFLINE`` reads them) is told without asking."""
    import datasets

    if Path(name).is_dir() or _in_datasets_cache(name) or name in _HUB_ANSWERED:
        return None
    if datasets.config.HF_HUB_OFFLINE:
        return _no_hub_line(name, OFFLINE)
    from huggingface_hub import HfApi

    from ...models import is_unreachable_error

    try:
        HfApi().dataset_info(name, timeout=10)
    except Exception as err:  # noqa: BLE001 - the HTTP library's own errors (a ConnectError) are not the Hub's
        if is_unreachable_error(err):
            return _no_hub_line(name, _hub_down(err))
    _HUB_ANSWERED.add(name)
    return None


# Names the Hub has answered for in this process: the command line asks before it loads the model and the source
# asks again when it is made; one request (up to 10 s) is enough. A failed answer is never kept: the network may
# come back.
_HUB_ANSWERED: set[str] = set()

OFFLINE = (
    "the Hub is offline (HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set; unset it where there is a network to download "
    "the dataset)"
)


def _no_hub_line(name: str, why: str) -> str:
    return (
        f"the dataset {name!r} is not in the local datasets cache and {why}: without a network, give a local source "
        "instead: text:PATH (a UTF-8 text or JSONL file), words:PATH (a file of words, one a line), the built-in text "
        "or words, or hf:FOLDER (a dataset saved with Dataset.save_to_disk where there is a network)"
    )


def _hub_down(err: BaseException) -> str:
    """Why the Hub was not reached, for :func:`_no_hub_line`."""
    import datasets

    if datasets.config.HF_HUB_OFFLINE:
        return OFFLINE
    while isinstance(err, ConnectionError) and err.__cause__ is not None:  # datasets' wrapper of the HTTP error
        err = err.__cause__
    reason = f"{type(err).__name__}: {' '.join(str(err).split())}" if str(err) else type(err).__name__
    return f"the Hugging Face Hub cannot be reached ({reason}; check the network, HF_ENDPOINT, or a proxy)"


def _in_datasets_cache(name: str) -> bool:
    """Whether the ``datasets`` cache holds a prepared copy of the Hub dataset ``name``: where load_dataset looks
    for one when the Hub cannot be reached
    (``HF_DATASETS_CACHE/<namespace>___<snake_case name>/<config>/<version>/<hash>``, as its fallback spells it)."""
    import datasets
    from datasets.naming import camelcase_to_snakecase

    parts = name.split("/")
    if len(parts) > 2 or not all(parts):
        return False
    parts[-1] = camelcase_to_snakecase(parts[-1])
    folder = Path(datasets.config.HF_DATASETS_CACHE).expanduser() / "___".join(parts)
    return folder.is_dir() and any(path.is_dir() for path in folder.glob("*/*/*"))


def make_source(
    spec,
    tokenizer,
    vocab_size: int | None = None,
    *,
    nested_text: bool = False,
    default_word_list: str = "pydoc_data",
    text_chunks: int | None = None,
    words_per_token: int | str | None = AUTO_WORDS_PER_TOKEN,
) -> SequenceSource:
    """Build a source from a spec string (see the module docstring), or a ``datasets.Dataset`` of texts.

    ``nested_text`` makes text sources nested (the published protocol); ``default_word_list`` is what a bare
    ``words`` means: "pydoc_data" (ut-peft's protocol) or "glove" (the published one); ``text_chunks``: nested
    texts are disjoint runs of whole paragraphs of at least this many tokens (:class:`TextSource`), not documents;
    ``words_per_token``: how a words source draws its texts (:func:`list_words_per_token`; other sources ignore it).
    """
    check_words_per_token(words_per_token)
    is_text = not isinstance(spec, (str, SequenceSource)) or (
        isinstance(spec, str) and spec.partition(":")[0] in ("text", "hf")
    )
    if text_chunks is not None and not is_text:
        raise ValueError(f"text chunks (--text-chunks) divide a text source (text, text:PATH, hf:NAME), not {spec!r}")
    if isinstance(spec, SequenceSource):
        return spec
    if not isinstance(spec, str):  # a datasets.Dataset (or DatasetDict split) given from Python
        return TextSource(
            tokenizer,
            dataset_documents(spec),
            name=f"dataset:{getattr(spec, '_fingerprint', '?')}",
            nested=nested_text,
            chunk_tokens=text_chunks,
        )
    kind, _, arg = spec.partition(":")
    if kind == "text":
        if not arg:
            return TextSource(
                tokenizer, default_documents(), name="pydoc_data", nested=nested_text, chunk_tokens=text_chunks
            )
        try:  # the file's content is recorded (sha256): a resume refuses an edited file
            text, digest = _read_file(arg)
        except ValueError as err:
            raise ValueError(f"{spec}: {err}") from None
        return TextSource(
            tokenizer, read_documents(arg, text), name=arg, nested=nested_text, chunk_tokens=text_chunks, sha256=digest
        )
    if kind == "words":
        arg = arg or default_word_list
        per_token = list_words_per_token(arg, words_per_token)
        if arg == "glove":
            words, digest = glove_words()
            return WordsSource(tokenizer, words, name=GLOVE_WORDS_NAME, words_per_token=per_token, sha256=digest)
        if arg == "wordfreq":
            return WordsSource(tokenizer, wordfreq_words(), name="wordfreq:en:100000", words_per_token=per_token)
        if arg == "pydoc_data":
            return WordsSource(tokenizer, default_words(), name=arg, words_per_token=per_token)
        try:
            text, digest = _read_file(arg, WORDS_FILE)
        except ValueError as err:
            raise ValueError(f"{spec}: {err}") from None
        return WordsSource(tokenizer, text.split(), name=arg, words_per_token=per_token, sha256=digest)
    if kind == "tokens":
        return TokensSource(vocab_size if vocab_size is not None else len(tokenizer))
    if kind == "hf":
        import datasets

        parts = arg.split(":")
        name = parts[0]
        split = parts[1] if len(parts) > 1 and parts[1] else "train"
        column = parts[2] if len(parts) > 2 and parts[2] else "text"
        if not name:
            raise ValueError("hf: needs a dataset name, e.g. hf:wikitext:train:text")
        # Asked once, in seconds, before load_dataset: without a network it retries the Hub for about 23 s.
        problem = hub_dataset_problem(name)
        if problem is not None:
            raise ValueError(f"{spec}: {problem}")
        try:
            data = datasets.load_from_disk(name) if Path(name).is_dir() else datasets.load_dataset(name, split=split)
        except ConnectionError as err:  # the network went since it was asked, or offline mode (datasets' own type)
            raise ValueError(f"{spec}: {_no_hub_line(name, _hub_down(err))}") from None
        except Exception as err:  # the datasets library raises many kinds; report them all the same way
            raise ValueError(f"cannot load the dataset {name!r} (split {split!r}): {err}") from None
        if isinstance(data, datasets.DatasetDict):
            if split not in data:
                raise ValueError(f"the dataset {name!r} has no split {split!r} (splits: {', '.join(data)})")
            data = data[split]
        return TextSource(
            tokenizer,
            dataset_documents(data, column),
            name=f"hf:{name}:{split}:{column}",
            nested=nested_text,
            chunk_tokens=text_chunks,
        )
    raise ValueError(
        f"unknown source {spec!r}: use text, text:PATH, hf:NAME[:SPLIT[:COLUMN]], words, "
        "words:glove, words:wordfreq, words:PATH or tokens"
    )


# Sources whose spec is not "KIND:NAME" of their description's name: the bundled text and word lists.
_NAMED_SOURCES = {
    ("text", "pydoc_data"): "text",
    ("words", "pydoc_data"): "words:pydoc_data",
    ("words", GLOVE_WORDS_NAME): "words:glove",
    ("words", "wordfreq:en:100000"): "words:wordfreq",
}


def default_word_list(protocol: str) -> str:
    """The list a bare ``words`` means under ``protocol``: the paper's under the published protocol, ut-peft's own
    otherwise."""
    return "glove" if protocol == "published" else "pydoc_data"


def source_word_list(source, protocol: str) -> str | None:
    """The word list the source spec ``source`` names under ``protocol`` (``glove``, ``wordfreq``, a path; a bare
    ``words``: the protocol's list), None for a source that draws no words (or one given from Python)."""
    kind, _, name = source.partition(":") if isinstance(source, str) else ("", "", "")
    if kind != "words":
        return None
    return name or default_word_list(protocol)


def source_spec(description: dict) -> str:
    """The source spec (``SweepConfig.source``, ``--source``) that builds the source a settings.json describes (its
    ``"source"``: ``SequenceSource.describe()``): ``tokens``, ``text``, ``text:PATH``, ``hf:NAME:SPLIT:COLUMN``,
    ``words:glove``, ``words:wordfreq``, ``words:pydoc_data`` or ``words:PATH``. A file's description records its
    sha256, so a file named like a bundled list is read as the file. ValueError for a source given from Python (a
    ``datasets.Dataset``), which settings.json names but does not hold."""
    kind, name = description.get("kind"), description.get("name")
    if kind == "tokens":
        return "tokens"
    if kind == "text" and isinstance(name, str) and name.startswith("hf:"):
        return name
    if kind in ("text", "words") and isinstance(name, str) and not name.startswith("dataset:"):
        named = _NAMED_SOURCES.get((kind, name))
        # The GloVe list's description records its digest too: only the other bundled sources are told by its absence.
        if named is not None and ("sha256" not in description or name == GLOVE_WORDS_NAME):
            return named
        return f"{kind}:{name}"
    raise ValueError(
        f"the source {description} was given from Python (a dataset object), which settings.json does not hold: "
        "rebuild its config from Python (SweepConfig.from_settings(settings, source=the dataset, ...))"
    )
