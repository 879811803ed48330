"""``biorank datasets``: the public data the docs and the tests use, fetched, verified and laid out as they expect."""

from __future__ import annotations

from pathlib import Path

import click

from biorank.cli.main import cli
from biorank.cli.render import echo, say, stage_progress

DATA_HELP = "The data folder [env: BIORANK_DATA, which the tests read too; default: ./data]."


def _data_option():  # type: ignore[no-untyped-def]
    return click.option("--to", "folder", type=click.Path(file_okay=False, path_type=Path), envvar="BIORANK_DATA",
                        default=Path("data"), metavar="DIR", help=DATA_HELP)


@cli.group()
def datasets() -> None:
    """The public data sets the docs and the tests use, fetched from their publishers, checked against pinned
    SHA-256 values and laid out as every example expects (data/scifact/corpus.jsonl, data/nfcorpus/dev.docs, ...).

    \b
    Examples:
      biorank datasets list                     each set: size, licence, source, and whether ./data has it
      biorank datasets get scifact              into ./data (--to DIR, or BIORANK_DATA); resumes if cut off
      biorank datasets get scifact nfcorpus pubmed pubmedqa --to ~/biorank-data
      biorank datasets get bioasq --from https://mirror.example.org/data    a copy laid out the same way
      biorank index data/scifact/corpus.jsonl --index scifact
    """


@datasets.command("list")
@_data_option()
def datasets_list(folder: Path) -> None:
    """Each data set: its size, whether the data folder has it (every file checked against its pin), what it is,
    where it comes from, and its licence and citation.

    \b
    Examples:
      biorank datasets list                       what ./data holds
      biorank datasets list --to ~/biorank-data   what another folder holds (or BIORANK_DATA=~/biorank-data)
    """
    from biorank.datasets import DATASETS, presence

    say(f"data folder: {folder}")
    for ds in DATASETS.values():
        found = presence(ds, folder)
        size = ds.approximate or f"{ds.size / 1e6:.1f} MB"
        have = found.describe() + (f" ({', '.join(p.rsplit('/', 1)[-1] for p in found.verified)})"
                                   if ds.newest and found.verified else "")
        say(f"{ds.name:<17} {size:>8}   here: {have}")
        say(f"  {ds.about}")
        say(f"  from {ds.origin}")
        say(f"  {ds.licence}")
    say(f"get one: biorank datasets get NAME --to {folder}   (--from URL|DIR: a mirror laid out the same way)")


@datasets.command("get")
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@_data_option()
@click.option("--from", "mirror", metavar="URL|DIR", envvar="BIORANK_DATA_MIRROR",
              help="Copy from a mirror laid out as the data folder (an http(s) URL or a folder) instead of the "
                   "publishers, verified the same way [env: BIORANK_DATA_MIRROR].")
def datasets_get(names: tuple[str, ...], folder: Path, mirror: str | None) -> None:
    """Fetch data sets into the data folder, each file verified against its pinned SHA-256.

    \b
    Sets: scifact, nfcorpus, pubmed, pubmed-update (NLM's newest update file, checked by its .md5),
    pubmedqa, bioasq, bioasq-abstracts; `biorank datasets list` says what each is. BioASQ hands its data
    only to registered users: `get bioasq` prints the steps, or copies it --from a mirror that has it.
    A download cut off resumes where it stopped on the next run; a file already there and verified is not
    fetched again; a file takes its name only once verified (NAME.part until then).

    \b
    Examples:
      biorank datasets get scifact          -> data/scifact/corpus.jsonl, claims_train.jsonl, queries_train.jsonl,
                                               qrels/train.tsv
      biorank datasets get nfcorpus pubmedqa --to /srv/biorank-data
      biorank datasets get bioasq bioasq-abstracts --from /mnt/team/data
      biorank datasets get pubmed-update && biorank sync data/pubmed/updatefiles --index pubmed
    """
    from biorank.datasets import dataset, get, instructions, presence
    from biorank.datasets.transfer import shown
    from biorank.errors import DatasetError

    # Every name is checked, and every set that needs its user's own steps, before anything is downloaded.
    sets = [dataset(name) for name in dict.fromkeys(names)]
    for ds in sets:
        if mirror is None and not ds.sources and not presence(ds, folder).complete:
            for line in instructions(ds, folder):
                echo(line)
            raise DatasetError(f"{ds.name} cannot be fetched by a program: take the steps above, or copy it from a "
                               "mirror with --from URL|DIR")
    echo(f"data folder: {folder}" + (f"; from the mirror {shown(mirror)}" if mirror else ""))
    with stage_progress() as progress:
        for ds in sets:
            fetched = get(ds, folder, mirror, progress=progress, echo=echo)
            files = len(fetched.written) + len(fetched.kept)
            where = folder / (ds.newest or ds.files[0].path.split("/", 1)[0])
            say(f"{ds.name}: {files} file{'s' if files != 1 else ''} in {where}, verified "
                f"({len(fetched.written)} fetched, {len(fetched.kept)} already there)")
