/* stackshot-dump: the name `stackshot dump` had first; the same decoder
 * (dump_main.c), kept for the scripts and tests that call it. */
int ss_dump_main(int argc, char **argv);

int main(int argc, char **argv) { return ss_dump_main(argc, argv); }
