from nodeagent.cli import main

main()
