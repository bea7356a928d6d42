from ppopt.cli import main

main()
