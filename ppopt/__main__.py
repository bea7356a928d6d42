from ppopt.entry import main

main()
