"""``python -m dmlkit`` runs the command-line tool."""

if __name__ == "__main__":
    from dmlkit.cli.entry import run

    run()
