from nodeagent.agent.launch import main

main()
