"""`dflash-supervisor verify --prompts FILE --output PREFIX`: a whole job checked from outside."""
