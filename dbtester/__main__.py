from dbtester.cli import main

main()
