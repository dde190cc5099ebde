int main(void) { return 77; /* written in a following change */ }
