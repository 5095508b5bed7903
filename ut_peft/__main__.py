"""``python -m ut_peft COMMAND [flags]``: the ``ut-peft`` console script (see :mod:`ut_peft.cli`)."""

from ut_peft.cli import main

if __name__ == "__main__":
    main()
