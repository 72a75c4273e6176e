from kubeforge.cli import main

main()
