from chime_client.cli import main

main()
