from memplan_cli.cli import run

run()
