"""Tests of keras_transformer.data.marian_vocabulary against Hugging Face's MarianTokenizer."""

import json
import random
import warnings

import pytest

tf = pytest.importorskip("tensorflow")
transformers = pytest.importorskip("transformers")

from keras_transformer.data.marian_vocabulary import MarianVocabulary  # noqa: E402
from keras_transformer.data.vocabulary import SubwordVocabulary, load_vocabulary  # noqa: E402
from keras_transformer.errors import UserInputError  # noqa: E402
from tests._marian_vocab_fixtures import write_marian_vocabulary  # noqa: E402

# An unknown character (€), one known to the target side only (ü), language tokens at the
# start, unknown and in the middle, literal special tokens, and untidy spaces.
TEXTS = [
    ">>deu<< The house is small.",
    "The house € is zqx.",
    "  The   house  ",
    ">>xyz<<The park",
    "x>>deu<< y",
    ">>deu<<",
    ">>deu<< a << b <<",
    "",
    "Ünïcode ｆｕｌｌ ü ß",
    "Where is the station? Wo ist der Bahnhof?",
]
LITERAL_SPECIALS = "Hello </s> world <unk> x <pad>"


def _marian_tokenizer(folder, separate=False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses."
        return transformers.MarianTokenizer(
            str(folder / "source.spm"),
            str(folder / "target.spm"),
            str(folder / "vocab.json"),
            target_vocab_file=str(folder / "target_vocab.json") if separate else None,
            separate_vocabs=separate,
        )


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    folder = tmp_path_factory.mktemp("marian_vocabulary")
    write_marian_vocabulary(folder)
    return folder, MarianVocabulary.from_folder(folder), _marian_tokenizer(folder)


@pytest.fixture(scope="module")
def separate(tmp_path_factory):
    folder = tmp_path_factory.mktemp("marian_separate")
    write_marian_vocabulary(folder, separate_target_vocab=True)
    return MarianVocabulary.from_folder(folder), _marian_tokenizer(folder, separate=True)


def _random_ids(size, count=200, seed=0):
    rng = random.Random(seed)
    return [[rng.randrange(size) for _ in range(rng.randrange(0, 12))] for _ in range(count)]


def test_special_ids_come_from_the_table(shared):
    folder, vocabulary, _ = shared
    table = json.loads((folder / "vocab.json").read_text())
    assert vocabulary.size == len(table)
    assert (vocabulary.eos_id, vocabulary.unk_id) == (0, 1)
    assert vocabulary.pad_id == vocabulary.bos_id == len(table) - 1
    assert vocabulary.language_tokens == (">>deu<<", ">>fra<<")


@pytest.mark.parametrize("text", TEXTS + [LITERAL_SPECIALS])
def test_encoding_is_marian_tokenizers(shared, text):
    _, vocabulary, reference = shared
    assert vocabulary.encode_source(text) == reference(text).input_ids
    assert vocabulary.encode_target(text) == reference(text_target=text).input_ids
    assert vocabulary.encode_source(text, add_eos=False) == reference(text).input_ids[:-1]


def test_language_token_unknown_character_and_target_only_piece(shared):
    folder, vocabulary, _ = shared
    table = json.loads((folder / "vocab.json").read_text())
    ids = vocabulary.encode_source(">>deu<< ü €")
    assert ids[0] == table[">>deu<<"]
    assert table["ü"] in ids  # a piece of the table, though the source model lacks it
    assert ids[-2:] == [vocabulary.unk_id, vocabulary.eos_id]
    assert vocabulary.encode_source(">>xyz<< a")[0] == vocabulary.unk_id


def test_decoding_is_marian_tokenizers(shared):
    _, vocabulary, reference = shared
    for ids in _random_ids(vocabulary.size):
        assert vocabulary.decode_target(ids) == reference.decode(ids, skip_special_tokens=True)


def test_separate_target_table(separate):
    vocabulary, reference = separate
    assert vocabulary.separate_vocabs
    for text in TEXTS:
        assert vocabulary.encode_target(text) == reference(text_target=text).input_ids
        assert vocabulary.encode_source(text) == reference(text).input_ids
    size = max(vocabulary.target_table.values()) + 1
    for ids in _random_ids(size):
        assert vocabulary.decode_target(ids) == reference.decode(ids, skip_special_tokens=True)


def test_graph_tokenizer_is_the_python_one(shared):
    _, vocabulary, _ = shared
    tokenizer = vocabulary.make_graph_tokenizer()
    assert tokenizer.tokenize_source(TEXTS).to_list() == [
        vocabulary.encode_source(text, add_eos=False) for text in TEXTS
    ]
    assert tokenizer.tokenize_target(TEXTS).to_list() == [
        vocabulary.encode_target(text, add_eos=False) for text in TEXTS
    ]
    ids = _random_ids(vocabulary.size)
    texts = tokenizer.detokenize_target(tf.ragged.constant(ids, dtype=tf.int32)).numpy()
    assert [text.decode("utf-8") for text in texts] == [vocabulary.decode_target(i) for i in ids]


def test_graph_tokenizer_in_a_function_and_padded(shared):
    _, vocabulary, _ = shared

    @tf.function
    def round_trip(texts):
        tokenizer = vocabulary.make_graph_tokenizer()
        ids = tokenizer.tokenize_target(texts).to_tensor(vocabulary.pad_id)
        return tokenizer.detokenize_target(ids)

    texts = ["Das Haus ist klein.", "Wo ist der Park?"]
    expected = [vocabulary.decode_target(vocabulary.encode_target(text)) for text in texts]
    assert [t.decode("utf-8") for t in round_trip(tf.constant(texts)).numpy()] == expected


def test_load_vocabulary_of_folders(shared, tmp_path):
    folder, vocabulary, _ = shared
    loaded = load_vocabulary(folder)
    assert isinstance(loaded, MarianVocabulary) and loaded == vocabulary
    assert load_vocabulary(vocabulary) is vocabulary
    with pytest.raises(UserInputError, match="holds no vocabulary"):
        load_vocabulary(tmp_path)
    assert loaded.files()["vocab.json"] == (folder / "vocab.json").read_bytes()


def test_table_without_pad_is_refused(shared, tmp_path):
    folder, _, _ = shared
    table = json.loads((folder / "vocab.json").read_text())
    del table["<pad>"]
    with pytest.raises(UserInputError, match="<pad>"):
        MarianVocabulary(folder / "source.spm", folder / "target.spm", table)


def test_subword_vocabulary_side_named_methods(tmp_path):
    from tests._decoding_fixtures import train_char_vocabulary

    vocabulary = SubwordVocabulary(train_char_vocabulary(tmp_path))
    assert load_vocabulary(tmp_path) == vocabulary  # a run folder with vocab.model
    text = "abc cab"
    assert vocabulary.encode_source(text) == vocabulary.encode(text) + [vocabulary.eos_id]
    assert vocabulary.encode_target(text, add_eos=False) == vocabulary.encode(text)
    ids = vocabulary.encode_target(text)
    assert vocabulary.decode_target(ids) == vocabulary.decode(ids)
    tokenizer = vocabulary.make_graph_tokenizer()
    assert tokenizer.tokenize_source([text]).to_list() == [vocabulary.encode(text)]
    assert tokenizer.detokenize_target(tf.ragged.constant([ids])).numpy()[0].decode() == (
        vocabulary.decode(ids)
    )


@pytest.mark.parametrize("cache", [False, True])
def test_pipeline_encodes_each_side_with_its_own_model(shared, tmp_path, cache):
    """Every pair reaches the batches as the Python vocabulary encodes it (source.spm for the
    source, target.spm for the target), decoding starts from pad and pad fills the rows."""
    from keras_transformer.data.corpora import TextPairCorpus
    from keras_transformer.data.pipeline import TranslationPipeline
    from tests._marian_vocab_fixtures import SOURCE_TEXT, TARGET_TEXT

    folder, vocabulary, _ = shared
    sources = [">>deu<< " + line for line in SOURCE_TEXT] + ["Where is ü?"]
    targets = TARGET_TEXT + ["Wo ist ü?"]
    (tmp_path / "train.src").write_text("\n".join(sources) + "\n")
    (tmp_path / "train.tgt").write_text("\n".join(targets) + "\n")
    pipeline = TranslationPipeline(
        TextPairCorpus(tmp_path / "train.src", tmp_path / "train.tgt"),
        folder,  # the run folder: load_vocabulary picks the Marian files
        token_budget=256,
        max_length=64,
        cache_dir=str(tmp_path / "cache") if cache else None,
    )
    pad = vocabulary.pad_id
    rows = []
    for inputs, labels in pipeline.dataset(shuffle=False).as_numpy_iterator():
        for row in range(labels.shape[0]):
            ids = (inputs["source_ids"][row], inputs["target_ids"][row], labels[row])
            # Rows are padded with pad (the last id, not 0): strip it from the right.
            rows.append(tuple(tuple(_strip(part.tolist(), pad)) for part in ids))
    expected = []
    for source, target in zip(sources, targets):
        source_ids = vocabulary.encode_source(source)
        label_ids = vocabulary.encode_target(target)
        expected.append((tuple(source_ids), tuple([pad] + label_ids[:-1]), tuple(label_ids)))
    assert sorted(rows) == sorted(expected)


def _strip(ids, pad):
    ids = list(ids)
    while ids and ids[-1] == pad:
        ids.pop()
    return ids


def test_graph_tokenizer_sides_stay_apart_in_a_loaded_saved_model(shared, tmp_path):
    """Both SentencePiece models in one SavedModel, each side loaded back with its own."""
    _, vocabulary, _ = shared
    module = tf.Module()
    module.tokenizer = vocabulary.make_graph_tokenizer()
    spec = [tf.TensorSpec([None], tf.string)]
    module.source = tf.function(
        lambda t: module.tokenizer.tokenize_source(t).to_tensor(-1), input_signature=spec
    )
    module.target = tf.function(
        lambda t: module.tokenizer.tokenize_target(t).to_tensor(-1), input_signature=spec
    )
    tf.saved_model.save(module, str(tmp_path / "tokenizer"))
    loaded = tf.saved_model.load(str(tmp_path / "tokenizer"))
    texts = TEXTS[:3]
    for side, encode in (
        ("source", vocabulary.encode_source),
        ("target", vocabulary.encode_target),
    ):
        rows = getattr(loaded, side)(tf.constant(texts)).numpy().tolist()
        assert [[i for i in row if i >= 0] for row in rows] == [
            encode(t, add_eos=False) for t in texts
        ]
