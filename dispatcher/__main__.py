from dispatcher.ops.cli import main

main()
