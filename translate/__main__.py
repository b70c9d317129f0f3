from translate.cli import main

main()
