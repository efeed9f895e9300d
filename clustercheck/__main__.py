from clustercheck.cli import main

main()
