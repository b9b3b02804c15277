/* main.c - the primus binary: everything is in prm_launch_main; only main()
 * exits. */
#include <stdlib.h>

#include "primus/prm_launch.h"

int main(int argc, char **argv) { return prm_launch_main(argc, argv); }
