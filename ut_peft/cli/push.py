"""Upload a saved UT_REPROGRAM adapter folder to the Hugging Face Hub with its rendered model card.

    ut-peft push out/adapter someone/dyck-reprogram --dry-run     # the files and the cards, nothing uploaded
    ut-peft push out/adapter someone/dyck-reprogram --private     # create the repository if needed and upload

The folder is what ``model.save_pretrained(folder)`` wrote (adapter_config.json, adapter_model.safetensors). The card
(README.md) is rendered again from adapter_config.json for the repository it goes to, so its loading snippet names
that repository. Authentication is huggingface_hub's: ``--token``, else the HF_TOKEN variable or ``hf auth login``.
"""

from __future__ import annotations

import argparse

from .common import add_common_flags, parse_args, run


def main(args):
    # The library is imported here, not above: a command parses its flags (--help included) before torch loads.
    from ..hub import push_adapter_to_hub

    folder = args.folder
    result = push_adapter_to_hub(
        folder,
        args.repo_id,
        private=args.private,
        token=args.token,
        commit_message=args.commit_message,
        dry_run=args.dry_run,
    )
    if args.dry_run:
        print(result)
        return
    # The repository's page on the Hub the commit went to, as huggingface_hub returns it (HF_ENDPOINT's mirror, where
    # it points to one), not huggingface.co's, which may not hold it.
    print(f"uploaded {folder} to {result.repo_url}: {result.commit_url}")


def parse(argv=None, *, prog: str | None = None):
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="a saved adapter folder (adapter_config.json and adapter_model.safetensors)")
    p.add_argument("repo_id", help="the Hub repository, 'user/name' or 'name'")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the files and every card (each adapter's); upload and write nothing",
    )
    p.add_argument("--private", action="store_true", default=None, help="create the repository private")
    p.add_argument("--token", default=None, help="a Hub token (default: HF_TOKEN or the one `hf auth login` saved)")
    p.add_argument("--commit-message", default="Upload UT_REPROGRAM adapter", help="the upload's commit message")
    add_common_flags(p)
    return parse_args(p, argv)


if __name__ == "__main__":
    run(main, parse)
