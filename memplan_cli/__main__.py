from memplan_cli.cli import main

main()
