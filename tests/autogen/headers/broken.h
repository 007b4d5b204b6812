/* Does not parse: the generator must say where. */
struct ok { int a; };
struct broken { int a int b; };
