/* main.c - placeholder while the launcher lands. */
#include "primus/prm_base.h"
int main(void) { return 0; }
