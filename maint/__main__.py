from maint.cli import main

main()
