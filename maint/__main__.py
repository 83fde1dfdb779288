from maint.entry import main

main()
