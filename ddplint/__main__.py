from ddplint.cli import main

main()
